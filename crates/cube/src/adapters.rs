//! The wgpu runtime: adapters by index, and the backend on one of them through a graphics API
//! (`wgpu:N`, `vulkan:N`, `metal:N`, `webgpu`).

use std::sync::Mutex;

use burn_wgpu::wgpu as raw;
use burn_wgpu::{RuntimeOptions, WgpuDevice, graphics};
use cubecl::device::WgpuDeviceKind;
use switchyard_core::{Caps, DeviceKind, Error, Result};

use crate::Cube;

/// A wgpu adapter of this machine, as `wgpu:N` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapter {
    /// Its position in [`adapters`]: the `N` of `wgpu:N`.
    pub index: usize,
    /// The adapter's name, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// The graphics API it was found on (`Vulkan`, `Metal`, `Gl`, ...).
    pub api: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` (a software renderer) or `Other`.
    pub kind: String,
    /// The driver's name, e.g. `llvmpipe`, where the driver gives one.
    pub driver: String,
    device: WgpuDevice,
}

impl Adapter {
    /// Whether this is Mesa's software Vulkan driver, which crashes compiling SPIR-V kernels.
    pub fn is_llvmpipe(&self) -> bool {
        self.api == "Vulkan" && (self.name.contains("llvmpipe") || self.driver == "llvmpipe")
    }

    /// `wgpu:N name (api, kind)`, for messages.
    fn describe(&self) -> String {
        format!("wgpu:{} {} ({}, {})", self.index, self.name, self.api, self.kind)
    }
}

/// The adapters wgpu finds on this machine, on every graphics API, in its order.
pub fn adapters() -> Vec<Adapter> {
    let instance = raw::Instance::new(raw::InstanceDescriptor {
        backends: raw::Backends::all(),
        ..raw::InstanceDescriptor::new_without_display_handle()
    });
    let infos: Vec<raw::AdapterInfo> =
        pollster_block_on(instance.enumerate_adapters(raw::Backends::all()))
            .iter()
            .map(raw::Adapter::get_info)
            .collect();
    infos
        .iter()
        .enumerate()
        .map(|(index, info)| {
            // The runtime numbers adapters by kind within one graphics API.
            let nth = infos[..index]
                .iter()
                .filter(|i| i.backend == info.backend && i.device_type == info.device_type)
                .count();
            let kind = match info.device_type {
                raw::DeviceType::DiscreteGpu => WgpuDeviceKind::DiscreteGpu(nth),
                raw::DeviceType::IntegratedGpu => WgpuDeviceKind::IntegratedGpu(nth),
                raw::DeviceType::VirtualGpu => WgpuDeviceKind::VirtualGpu(nth),
                raw::DeviceType::Cpu => WgpuDeviceKind::Cpu,
                raw::DeviceType::Other => WgpuDeviceKind::Other(nth),
            };
            let api = match info.backend {
                raw::Backend::Vulkan => burn_wgpu::WgpuBackend::Vulkan,
                raw::Backend::Metal => burn_wgpu::WgpuBackend::Metal,
                raw::Backend::Dx12 => burn_wgpu::WgpuBackend::Dx12,
                raw::Backend::Gl => burn_wgpu::WgpuBackend::Gl,
                raw::Backend::BrowserWebGpu => burn_wgpu::WgpuBackend::WebGpu,
                raw::Backend::Noop => burn_wgpu::WgpuBackend::Auto,
            };
            Adapter {
                index,
                name: info.name.clone(),
                api: format!("{:?}", info.backend),
                kind: format!("{:?}", info.device_type),
                driver: info.driver.clone(),
                device: WgpuDevice::new(kind).on(api),
            }
        })
        .collect()
}

/// Blocks on a future that completes without waking (wgpu's native adapter enumeration).
fn pollster_block_on<F: Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The backend on adapter `index` of [`adapters`]: an error naming the adapters there are if
/// there is no such adapter or it cannot start.
pub(crate) fn wgpu(index: usize) -> Result<Cube> {
    let all = adapters();
    let adapter = all
        .get(index)
        .ok_or_else(|| Error::Device(format!("wgpu:{index}: no such adapter; {}", listed(&all))))?;
    start::<graphics::AutoGraphicsApi>(&format!("wgpu:{index}"), adapter)
}

/// The backend on the `index`-th Vulkan adapter, with kernels compiled to SPIR-V.
#[cfg(feature = "vulkan")]
pub(crate) fn vulkan(index: usize) -> Result<Cube> {
    let all = adapters();
    let adapter = all.iter().filter(|a| a.api == "Vulkan").nth(index).ok_or_else(|| {
        Error::Device(format!("vulkan:{index}: no such Vulkan adapter; {}", listed(&all)))
    })?;
    start::<graphics::Vulkan>(&format!("vulkan:{index}"), adapter)
}

/// The backend on the `index`-th Metal adapter, with kernels compiled to MSL.
#[cfg(feature = "metal")]
pub(crate) fn metal(index: usize) -> Result<Cube> {
    let all = adapters();
    let adapter = all.iter().filter(|a| a.api == "Metal").nth(index).ok_or_else(|| {
        Error::Device(format!(
            "metal:{index}: no such Metal adapter (Metal is Apple's); {}",
            listed(&all)
        ))
    })?;
    start::<graphics::Metal>(&format!("metal:{index}"), adapter)
}

/// The backend on the WebGPU adapter, with WGSL kernels: the browser's WebGPU, which wgpu
/// offers in WebAssembly builds; natively, GPUs are `wgpu:N`.
#[cfg(feature = "webgpu")]
pub(crate) fn webgpu() -> Result<Cube> {
    let all = adapters();
    let adapter = all.iter().find(|a| a.api == "BrowserWebGpu").ok_or_else(|| {
        Error::Device(format!(
            "webgpu: no WebGPU adapter (the browser's, in WebAssembly builds; a native build \
             reaches its GPUs as wgpu:N); {}",
            listed(&all)
        ))
    })?;
    start::<graphics::WebGpu>("webgpu", adapter)
}

/// The adapters there are, for an error message.
fn listed(all: &[Adapter]) -> String {
    if all.is_empty() {
        "wgpu finds no adapter on this machine (no GPU driver; for a software one install Mesa's \
         Vulkan driver, Debian package mesa-vulkan-drivers)"
            .to_owned()
    } else {
        let names: Vec<String> = all.iter().map(Adapter::describe).collect();
        format!("adapters: {}", names.join("; "))
    }
}

/// Starts the runtime on `adapter` through graphics API `G` once per process (the runtime
/// registers each adapter once; a second registration is an error), refusing what would crash;
/// later calls share the started device.
fn start<G: graphics::GraphicsApi>(label: &str, adapter: &Adapter) -> Result<Cube> {
    static STARTED: Mutex<Vec<(String, cubecl::Device, Caps)>> = Mutex::new(Vec::new());
    refuse_spirv_on_llvmpipe(label, adapter)?;
    // A panic elsewhere while this was held leaves the list itself intact.
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, device, caps)) = started.iter().find(|(l, ..)| l == label) {
        return crate::backend_on(device.clone(), caps.clone());
    }
    let fail =
        |e: &dyn std::fmt::Display| Error::Device(format!("{label} ({}): {e}", adapter.name));
    let setup = burn_wgpu::try_init_setup::<G>(&adapter.device, RuntimeOptions::default())
        .map_err(|e| fail(&e))?;
    let device = burn_wgpu::try_init_device_with_api::<G>(setup, RuntimeOptions::default())
        .map_err(|e| fail(&e))?;
    // A software adapter (Mesa's llvmpipe) is a CPU running shaders.
    let kind = if adapter.kind == "Cpu" { DeviceKind::Cpu } else { DeviceKind::Gpu };
    let device = cubecl::Device::from(device);
    let caps = crate::caps::caps(label, &device, kind);
    started.push((label.to_owned(), device.clone(), caps.clone()));
    crate::backend_on(device, caps)
}

/// With the `vulkan` feature, wgpu compiles kernels to SPIR-V on Vulkan adapters, and Mesa's
/// llvmpipe segfaults creating the matmul pipeline from it (Mesa 22.3): refuse, naming the fix,
/// rather than crash the caller's process.
fn refuse_spirv_on_llvmpipe(label: &str, adapter: &Adapter) -> Result<()> {
    if cfg!(feature = "vulkan") && adapter.is_llvmpipe() {
        return Err(Error::Device(format!(
            "{label} is {}: this build's `vulkan` feature compiles kernels to SPIR-V, which \
             Mesa's llvmpipe crashes on; use a build without `vulkan` (its `wgpu` feature \
             compiles WGSL, which llvmpipe runs)",
            adapter.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, api: &str, driver: &str) -> Adapter {
        Adapter {
            index: 0,
            name: name.into(),
            api: api.into(),
            kind: "Cpu".into(),
            driver: driver.into(),
            device: WgpuDevice::default(),
        }
    }

    #[test]
    fn llvmpipe_is_recognised_by_name_or_driver_on_vulkan_only() {
        assert!(adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", "").is_llvmpipe());
        assert!(adapter("software", "Vulkan", "llvmpipe").is_llvmpipe());
        assert!(!adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "Gl", "").is_llvmpipe());
        assert!(!adapter("NVIDIA H200", "Vulkan", "NVIDIA").is_llvmpipe());
    }

    #[test]
    fn spirv_on_llvmpipe_is_refused_exactly_when_the_vulkan_feature_is_on() {
        let lvp = adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", "llvmpipe");
        let got = refuse_spirv_on_llvmpipe("wgpu:0", &lvp);
        assert_eq!(got.is_err(), cfg!(feature = "vulkan"), "{got:?}");
        let gpu = adapter("NVIDIA H200", "Vulkan", "NVIDIA");
        assert!(refuse_spirv_on_llvmpipe("wgpu:0", &gpu).is_ok());
    }
}
