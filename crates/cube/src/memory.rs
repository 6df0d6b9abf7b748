//! What a cube device's memory holds, from CubeCL's own pools: whether a run asks the driver
//! for memory, or only reuses what earlier runs left in the pools.

use cubecl::{MemoryPoolsReport, MemoryScope};

use crate::Cube;

/// A snapshot of the memory CubeCL holds on a device, every stream of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The pools tensors live in: the weights, and each run's activations and tables.
    pub tensors: Pools,
    /// What the runtime keeps beside them for its own use: on wgpu, staging buffers for reads
    /// and the uniform buffers of launches' shapes, which it caches (at most 512 of them), so
    /// this grows a little with each new batch shape until the cache is full.
    pub runtime: Pools,
}

/// The device allocations of some of CubeCL's pools, and what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pools {
    /// Device allocations (pages) held.
    pub pages: u64,
    /// Bytes the pages hold.
    pub bytes_reserved: u64,
    /// Bytes of live tensors and buffers.
    pub bytes_in_use: u64,
    /// Live tensors and buffers (slices of the pages).
    pub slices: u64,
}

impl Pools {
    /// Adds the pools of `report`.
    fn add(&mut self, report: &MemoryPoolsReport) {
        for pool in report.dynamic.iter().chain([&report.persistent, &report.dedicated]) {
            self.pages += pool.pages;
            self.bytes_reserved += pool.usage.bytes_reserved;
            self.bytes_in_use += pool.usage.bytes_in_use;
            self.slices += pool.usage.number_allocs;
        }
    }
}

/// What CubeCL holds on `cube`'s device now, every stream of it.
pub fn device_memory(cube: &Cube) -> DeviceMemory {
    memory(cube, MemoryScope::Device)
}

/// What CubeCL holds now for the calling thread's work on `cube`'s device: the pools of the
/// thread's stream (CubeCL gives each thread its own), which the thread's runs, and the weights
/// it uploaded, use.
pub fn thread_memory(cube: &Cube) -> DeviceMemory {
    memory(cube, MemoryScope::CurrentStream)
}

fn memory(cube: &Cube, scope: MemoryScope) -> DeviceMemory {
    let report = cube.device().client().memory_report(scope);
    let mut memory = DeviceMemory::default();
    for stream in &report.streams {
        memory.tensors.add(&stream.pools);
        for own in &stream.auxiliary {
            memory.runtime.add(&own.pools);
        }
    }
    memory
}
