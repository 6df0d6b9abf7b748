//! The kernel choices a process may make for every cube device it opens, in its environment:
//! what a user, a server or a benchmark on a machine without a toolchain can change without a
//! rebuild.

use switchyard_core::{Error, Result};

use crate::Matmul;

/// The environment variable naming the routine of the products under the epilogue: a
/// [`Matmul`] by name (`burn`, the default; `tuned`; one of cubek's routines; `cublas` or
/// `cublas-queued` on CUDA devices).
pub const MATMUL_ENV: &str = "SWITCHYARD_CUBE_MATMUL";

/// The environment variable choosing how half-precision attention runs: `rows` (the default:
/// the row kernel) or `tiles` (16 x 16 tiles, on tensor cores where the device has them).
pub const ATTENTION_ENV: &str = "SWITCHYARD_CUBE_ATTENTION";

/// Kernel choices from the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Choices {
    /// The routine of the products.
    pub(crate) matmul: Matmul,
    /// Whether half-precision attention runs in tiles.
    pub(crate) tiles: bool,
}

/// The choices [`MATMUL_ENV`] and [`ATTENTION_ENV`] make: the defaults where unset or blank, an
/// error naming the variable and what it takes where a value is not one of those.
pub(crate) fn choices() -> Result<Choices> {
    let var = |name| std::env::var(name).ok();
    parse(var(MATMUL_ENV).as_deref(), var(ATTENTION_ENV).as_deref())
}

/// A variable's value, trimmed: `None` where unset or blank.
fn set(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// [`choices`] for `device`: also an error where the matmul chosen cannot run there at all.
pub(crate) fn choices_on(device: &cubecl::Device) -> Result<Choices> {
    let chosen = choices()?;
    match chosen.matmul.unavailable_on(device) {
        Some(why) => Err(Error::Device(format!("{MATMUL_ENV}={}: {why}", chosen.matmul))),
        None => Ok(chosen),
    }
}

fn parse(matmul: Option<&str>, attention: Option<&str>) -> Result<Choices> {
    let matmul = match set(matmul) {
        None => Matmul::default(),
        Some(v) => v.parse().map_err(|e| Error::Device(format!("{MATMUL_ENV}: {e}")))?,
    };
    let tiles = match set(attention) {
        None | Some("rows") => false,
        Some("tiles") => true,
        Some(v) => {
            return Err(Error::Device(format!(
                "{ATTENTION_ENV}=`{v}`: expected rows (the default) or tiles"
            )));
        }
    };
    Ok(Choices { matmul, tiles })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_blank_is_the_default_and_a_value_is_a_choice_or_an_error_naming_the_variable() {
        assert_eq!(parse(None, None).unwrap(), Choices::default());
        assert_eq!(parse(Some(" "), Some("")).unwrap(), Choices::default());
        assert_eq!(parse(Some("burn"), Some("rows")).unwrap(), Choices::default());
        let chosen = parse(Some(" tuned "), Some("tiles")).unwrap();
        assert_eq!(chosen, Choices { matmul: Matmul::Tuned, tiles: true });
        let e = parse(Some("fast"), None).unwrap_err().to_string();
        assert!(e.contains("SWITCHYARD_CUBE_MATMUL") && e.contains("`fast`"), "{e}");
        assert!(e.contains("tuned"), "the names it takes: {e}");
        let e = parse(None, Some("grid")).unwrap_err().to_string();
        assert!(e.contains("SWITCHYARD_CUBE_ATTENTION=`grid`") && e.contains("tiles"), "{e}");
    }
}
