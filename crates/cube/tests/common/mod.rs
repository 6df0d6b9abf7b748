//! The device the cube crate's tests run on: the one `SWITCHYARD_CUBE_DEVICE` names (`wgpu:N`,
//! `vulkan:N`, `metal:N`, `cuda:N`, `rocm:N`, `cubecl-cpu`), else the first wgpu adapter (in a
//! build without wgpu, `cuda:0`, `rocm:0` or `cubecl-cpu`, the first this build has).

use switchyard_core::Result;
use switchyard_cube::Cube;

/// The name of the device under test.
pub fn name() -> String {
    match std::env::var("SWITCHYARD_CUBE_DEVICE") {
        Ok(name) if !name.trim().is_empty() => name.trim().to_owned(),
        _ if cfg!(feature = "wgpu") => "wgpu:0".to_owned(),
        _ if cfg!(feature = "cuda") => "cuda:0".to_owned(),
        _ if cfg!(feature = "rocm") => "rocm:0".to_owned(),
        _ => "cubecl-cpu".to_owned(),
    }
}

/// Opens the device under test.
pub fn open() -> Result<Cube> {
    let name = name();
    let (runtime, index) = name.split_once(':').unwrap_or((name.as_str(), "0"));
    let Ok(index) = index.parse::<usize>() else {
        panic!("SWITCHYARD_CUBE_DEVICE={name}: expected RUNTIME[:INDEX], as in cuda:0");
    };
    match runtime {
        #[cfg(feature = "wgpu")]
        "wgpu" => switchyard_cube::wgpu::open(index),
        #[cfg(feature = "vulkan")]
        "vulkan" => switchyard_cube::vulkan::open(index),
        #[cfg(feature = "metal")]
        "metal" => switchyard_cube::metal::open(index),
        #[cfg(feature = "cuda")]
        "cuda" => switchyard_cube::cuda::open(index),
        #[cfg(feature = "rocm")]
        "rocm" => switchyard_cube::rocm::open(index),
        #[cfg(feature = "cpu")]
        "cubecl-cpu" => switchyard_cube::cpu::open(),
        other => panic!("SWITCHYARD_CUBE_DEVICE={name}: this build has no `{other}` runtime"),
    }
}
