//! Device names: families of devices as the table of backends declares them, and the devices
//! of a family, parsed from and printed as strings.

use std::fmt;
use std::str::FromStr;

use switchyard_core::{Error, Result};

/// The environment variable that names the default device.
pub const DEVICE_ENV: &str = "SWITCHYARD_DEVICE";

/// How the devices of a family are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// One device, named by the family's name alone (`flex`, `tch:cpu`).
    Bare,
    /// Devices by index: `NAME:N`, or `NAME` for device 0 (`cuda:1`, `wgpu`).
    Indexed,
    /// A server on another machine: `NAME:HOST:PORT` (`remote:gpu-box:7878`).
    Server,
}

/// A family of devices: one line of the table of backends (`crates/dispatch/src/backends.rs`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Family {
    /// The name devices of the family start with (`flex`, `cuda`, `tch:cuda`, `remote`).
    pub name: &'static str,
    /// How its devices are named after that.
    pub form: Form,
    /// The backend that runs them (`flex`, `cube`, `tch`, ...).
    pub backend: &'static str,
    /// The cargo feature of switchyard-dispatch (and of the CLI) that compiles it in.
    pub feature: &'static str,
    /// Whether this build has it.
    pub compiled: bool,
    /// Whether `switchyard remote-serve` can serve its devices to other machines.
    pub served: bool,
    /// Whether its backend runs on a Burn backend here, so training runs on its devices.
    pub trains: bool,
    /// What it is, in a line.
    pub about: &'static str,
}

impl Family {
    /// The family's names in one pattern: `flex`, `cuda[:N]`, `remote:HOST:PORT`.
    pub fn pattern(&self) -> String {
        match self.form {
            Form::Bare => self.name.to_owned(),
            Form::Indexed => format!("{}[:N]", self.name),
            Form::Server => format!("{}:HOST:PORT", self.name),
        }
    }

    /// Device `index` of the family (its only device for a bare family; none for servers,
    /// which are named by address).
    pub fn device(&'static self, index: u32) -> Option<Device> {
        let at = match self.form {
            Form::Indexed => At::Index(index),
            Form::Bare => At::Only,
            Form::Server => return None,
        };
        Some(Device { family: self, at })
    }

    /// `s` as a device of this family, if it names one; what is wrong with the rest if it
    /// starts like one but the rest is wrong.
    fn parse(&'static self, s: &str) -> Option<Result<Device, String>> {
        let rest = strip_prefix_ignore_case(s, self.name)?;
        let bad = |why: String| Some(Err(why));
        match (self.form, rest) {
            (Form::Bare, "") => Some(Ok(Device { family: self, at: At::Only })),
            (Form::Indexed, "") => Some(Ok(Device { family: self, at: At::Index(0) })),
            (Form::Indexed, r) => match r.strip_prefix(':')?.parse() {
                Ok(i) => Some(Ok(Device { family: self, at: At::Index(i) })),
                Err(_) => bad(format!(" (`{}` is not a device index)", &r[1..])),
            },
            (Form::Server, r) => {
                let r = r.strip_prefix(':')?;
                let Some((host, port)) = r.rsplit_once(':') else {
                    return bad(" (no port)".into());
                };
                let Ok(port) = port.parse::<u16>() else {
                    return bad(format!(" (`{port}` is not a port)"));
                };
                if port == 0 {
                    return bad(" (port 0 is no server's port)".into());
                }
                if host.is_empty() {
                    return bad(" (no host)".into());
                }
                Some(Ok(Device { family: self, at: At::Server { host: host.to_owned(), port } }))
            }
            (Form::Bare, _) => None,
        }
    }
}

/// `s` without `prefix`, compared ignoring ASCII case.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

/// Every device pattern of `families`, for messages and `--help`.
pub fn forms_in(families: &[Family]) -> String {
    families.iter().map(Family::pattern).collect::<Vec<_>>().join(", ")
}

/// Every device pattern of this workspace's table, compiled in or not.
pub fn forms() -> String {
    forms_in(crate::FAMILIES)
}

/// The error for a name no family of `families` takes (`why`: what is wrong with it, if it
/// starts like one).
fn unknown(families: &[Family], s: &str, why: &str) -> Error {
    // `cpu` meant four things once; the default CPU backend is named by its backend.
    let hint = if s.eq_ignore_ascii_case("cpu") {
        " (the default CPU backend is `flex`; CubeCL's CPU runtime is `cubecl-cpu`)"
    } else {
        ""
    };
    let forms = forms_in(families);
    Error::Device(format!("unknown device `{s}`{why}{hint}; expected one of: {forms}"))
}

/// Where a device is within its family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum At {
    /// The family's only device.
    Only,
    /// Device `N`.
    Index(u32),
    /// A server.
    Server { host: String, port: u16 },
}

/// A device a model can run on, by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    family: &'static Family,
    at: At,
}

impl Device {
    /// The default CPU device, `flex`.
    pub fn flex() -> Device {
        "flex".parse().expect("the table has flex")
    }

    /// `s` as a device of one of `families`.
    pub fn parse_in(families: &'static [Family], s: &str) -> Result<Device> {
        let t = s.trim();
        match families.iter().find_map(|f| f.parse(t)) {
            Some(Ok(d)) => Ok(d),
            Some(Err(why)) => Err(unknown(families, t, &why)),
            None => Err(unknown(families, t, "")),
        }
    }

    /// The family the device belongs to.
    pub fn family(&self) -> &'static Family {
        self.family
    }

    /// Its index within an indexed family (`N` of `cuda:N`).
    pub fn index(&self) -> Option<u32> {
        match self.at {
            At::Index(i) => Some(i),
            At::Only | At::Server { .. } => None,
        }
    }

    /// The host and port of a server device.
    pub fn server(&self) -> Option<(&str, u16)> {
        match &self.at {
            At::Server { host, port } => Some((host, *port)),
            At::Only | At::Index(_) => None,
        }
    }

    /// The default device: `SWITCHYARD_DEVICE` if set, else `flex`.
    pub fn from_env() -> Result<Device> {
        Device::from_env_value(std::env::var(DEVICE_ENV).ok().as_deref())
    }

    /// The default device given the value of `SWITCHYARD_DEVICE` (`None` or blank: `flex`).
    pub fn from_env_value(value: Option<&str>) -> Result<Device> {
        match value {
            Some(v) if !v.trim().is_empty() => v.parse().map_err(|e: Error| match e {
                Error::Device(m) => Error::Device(format!("{DEVICE_ENV}: {m}")),
                other => other,
            }),
            _ => Ok(Device::flex()),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            At::Only => f.write_str(self.family.name),
            At::Index(i) => write!(f, "{}:{i}", self.family.name),
            At::Server { host, port } => write!(f, "{}:{host}:{port}", self.family.name),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// A device of this workspace's table of backends, compiled into this build or not.
    fn from_str(s: &str) -> Result<Self> {
        Device::parse_in(crate::FAMILIES, s)
    }
}

/// The error for a device whose family this build lacks: it names the feature and what is
/// `available`.
pub fn not_compiled(device: &Device, available: &[Device]) -> Error {
    let available: Vec<String> = available.iter().map(Device::to_string).collect();
    let available = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
    Error::Device(format!(
        "device `{device}` is not compiled into this build; rebuild with the cargo feature `{}` \
         (of switchyard-dispatch, or switchyard's CLI). Available here: {available}",
        device.family.feature
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Device {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_form_parses_and_prints_back() {
        for s in [
            "flex",
            "ndarray",
            "capture",
            "cubecl-cpu",
            "cuda:0",
            "rocm:1",
            "vulkan:0",
            "wgpu:2",
            "metal:0",
            "webgpu",
            "tch:cpu",
            "tch:cuda:3",
            "remote:gpu-box:7860",
            "remote:[::1]:9000",
        ] {
            assert_eq!(d(s).to_string(), s);
        }
        assert_eq!(d("remote:[::1]:9000").server(), Some(("[::1]", 9000)));
        assert_eq!(d("tch:cuda:3").index(), Some(3));
        assert_eq!(d("tch:cuda:3").family().backend, "tch");
        assert_eq!(d("flex").index(), None);
    }

    #[test]
    fn short_forms_default_to_index_zero() {
        assert_eq!(d("cuda"), d("cuda:0"));
        assert_eq!(d(" WGPU ").to_string(), "wgpu:0");
        assert_eq!(d("tch:cuda").to_string(), "tch:cuda:0");
    }

    #[test]
    fn bad_names_list_the_accepted_forms() {
        for (s, why) in [
            ("gpu", "unknown device `gpu`"),
            ("cuda:x", "`x` is not a device index"),
            ("remote:host", "no port"),
            ("remote:host:99999", "`99999` is not a port"),
            ("remote:127.0.0.1:0", "port 0 is no server's port"),
            ("remote::80", "no host"),
            ("tch:rocm", "unknown device `tch:rocm`"),
            ("flex:1", "unknown device `flex:1`"),
            ("cpu", "the default CPU backend is `flex`; CubeCL's CPU runtime is `cubecl-cpu`"),
        ] {
            let e = s.parse::<Device>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("remote:HOST:PORT"), "{s}: {e}");
        }
    }

    #[test]
    fn every_family_names_a_feature_of_dispatch_and_of_the_cli() {
        let dispatch = include_str!("../Cargo.toml");
        let cli = include_str!("../../cli/Cargo.toml");
        for f in crate::FAMILIES {
            let line = format!("\n{} = [", f.feature);
            assert!(
                dispatch.contains(&line),
                "`{}`: dispatch has no feature {}",
                f.name,
                f.feature
            );
            let forward = format!("\"switchyard-dispatch/{}\"", f.feature);
            assert!(
                cli.contains(&line) && cli.contains(&forward),
                "`{}`: the CLI does not forward the feature {}",
                f.name,
                f.feature
            );
        }
    }

    #[test]
    fn family_names_do_not_shadow_each_other() {
        // A name that starts another family's would make parsing depend on the table's order.
        for a in crate::FAMILIES {
            for b in crate::FAMILIES {
                if a != b {
                    assert!(
                        !b.name.starts_with(&format!("{}:", a.name)),
                        "{} / {}",
                        a.name,
                        b.name
                    );
                    assert_ne!(a.name, b.name);
                }
            }
        }
    }

    #[test]
    fn the_environment_picks_the_default() {
        assert_eq!(Device::from_env_value(None).unwrap(), Device::flex());
        assert_eq!(Device::from_env_value(Some("  ")).unwrap(), Device::flex());
        assert_eq!(Device::from_env_value(Some("capture")).unwrap(), d("capture"));
        let e = Device::from_env_value(Some("tpu")).unwrap_err().to_string();
        assert!(e.contains("SWITCHYARD_DEVICE: unknown device `tpu`"), "{e}");
    }
}
