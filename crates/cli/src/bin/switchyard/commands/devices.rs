//! `switchyard devices`: every family of the table of backends, what this build has of it, and
//! what this machine has.

use anyhow::Result;
use switchyard::core::{Backend, DeviceKind};
use switchyard::dispatch::{FAMILIES, Family, Form};
use switchyard::{Device, Dispatch};

/// Prints one line per device family (and per device found), then the default device.
pub fn run() -> Result<()> {
    println!("{:<18} status", "device");
    for family in FAMILIES {
        for (name, status) in lines(family) {
            println!("{name:<18} {status}");
        }
    }
    println!("\ndefault: {} (set SWITCHYARD_DEVICE or --device to change)", Device::from_env()?);
    Ok(())
}

/// What to print for `family`: a line for the family, or one per device this machine has.
fn lines(family: &'static Family) -> Vec<(String, String)> {
    let pattern = family.pattern();
    if !family.compiled {
        let why = format!("not in this build: rebuild with the cargo feature `{}`", family.feature);
        return vec![(pattern, why)];
    }
    if family.form == Form::Server {
        let how =
            format!("in this build: name a server as {pattern} (see `switchyard remote-serve`)");
        return vec![(pattern, how)];
    }
    let count = Dispatch::count(family);
    if count == 0 {
        // Compiled in is not the same as present: opening the first device says why not.
        let why = family
            .device(0)
            .map(|d| match Dispatch::new(&d) {
                Err(e) => e.to_string(),
                Ok(_) => "none found".to_owned(),
            })
            .unwrap_or_default();
        return vec![(pattern, format!("in this build, not usable here: {why}"))];
    }
    (0..count)
        .filter_map(|i| family.device(i as u32))
        .map(|d| (d.to_string(), status(&d)))
        .collect()
}

/// A device's status: what it is and computes in, or why it cannot start.
fn status(d: &Device) -> String {
    match Dispatch::new(d).map(|b| b.caps()) {
        Err(e) => format!("in this build, not usable here: {e}"),
        Ok(caps) if caps.kind == DeviceKind::Virtual => {
            "available (records plans, executes nothing)".to_owned()
        }
        Ok(caps) => {
            let dtypes: Vec<&str> = caps.dtypes.iter().map(|d| d.name()).collect();
            let threads = match caps.threads {
                1 => "1 thread".to_owned(),
                n => format!("{n} threads"),
            };
            format!(
                "available ({} backend on {}, {threads}, computes in {})",
                caps.backend,
                caps.device,
                dtypes.join("/")
            )
        }
    }
}
