//! Every device family of the table of backends, what this build has of it, and what this
//! machine has: what `switchyard devices` prints and `switchyard.devices()` returns.

use switchyard_core::{Backend, DeviceKind};
use switchyard_dispatch::{FAMILIES, Family, Form};

use crate::{Device, Dispatch};

/// One line of the device list: a device (or a family's name pattern) and its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    /// The device's name (`flex`, `cuda:0`), or the family's pattern where it has no device
    /// here (`cuda:N`, `remote:HOST:PORT`).
    pub name: String,
    /// Whether a model can be opened on it as named.
    pub available: bool,
    /// What it is and computes in, or why it cannot be used here.
    pub status: String,
}

/// One line per device family, or per device this machine has of it, in the table's order.
pub fn devices() -> Vec<DeviceStatus> {
    FAMILIES.iter().flat_map(family_lines).collect()
}

/// What to list for `family`: a line for the family, or one per device this machine has.
fn family_lines(family: &'static Family) -> Vec<DeviceStatus> {
    let pattern = family.pattern();
    let unusable =
        |status: String| DeviceStatus { name: pattern.clone(), available: false, status };
    if !family.compiled {
        return vec![unusable(format!(
            "not in this build: rebuild with the cargo feature `{}`",
            family.feature
        ))];
    }
    if family.form == Form::Server {
        let status =
            format!("in this build: name a server as {pattern} (see `switchyard remote-serve`)");
        return vec![DeviceStatus { name: pattern.clone(), available: false, status }];
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
        return vec![unusable(format!("in this build, not usable here: {why}"))];
    }
    (0..count).filter_map(|i| family.device(i as u32)).map(|d| status(&d)).collect()
}

/// A device's status: what it is and computes in, or why it cannot start.
fn status(d: &Device) -> DeviceStatus {
    let (available, status) = match Dispatch::new(d).map(|b| b.caps()) {
        Err(e) => (false, format!("in this build, not usable here: {e}")),
        Ok(caps) if caps.kind == DeviceKind::Virtual => {
            (true, "available (records plans, executes nothing)".to_owned())
        }
        Ok(caps) => {
            let dtypes: Vec<&str> = caps.dtypes.iter().map(|d| d.name()).collect();
            let threads = match caps.threads {
                1 => "1 thread".to_owned(),
                n => format!("{n} threads"),
            };
            let trains = if d.family().trains { ", trains in f32" } else { "" };
            let what = format!(
                "available ({} backend on {}, {threads}, computes in {} (auto: {}){trains})",
                caps.backend,
                caps.device,
                dtypes.join("/"),
                caps.auto
            );
            (true, what)
        }
    };
    DeviceStatus { name: d.to_string(), available, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_listed_and_flex_is_available() {
        let list = devices();
        assert!(list.len() >= FAMILIES.len(), "{list:?}");
        let flex = list.iter().find(|d| d.name == "flex").expect("flex is listed");
        assert!(flex.available && flex.status.contains("computes in f32"), "{flex:?}");
        assert!(flex.status.contains("(auto: f32)"), "a CPU's auto is f32: {flex:?}");
        assert!(flex.status.contains(", trains in f32)"), "{flex:?}");
        let remote = list.iter().find(|d| d.name.starts_with("remote:"));
        assert!(remote.is_some_and(|r| !r.available), "{list:?}");
    }
}
