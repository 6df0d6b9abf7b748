//! `switchyard devices`: every family of the table of backends, what this build has of it, and
//! what this machine has.

use anyhow::Result;
use switchyard::Device;

/// Prints one line per device family (and per device found), then the default device.
pub fn run() -> Result<()> {
    println!("{:<18} status", "device");
    for d in switchyard::devices() {
        println!("{:<18} {}", d.name, d.status);
    }
    println!("\ndefault: {} (set SWITCHYARD_DEVICE or --device to change)", Device::from_env()?);
    Ok(())
}
