//! Moving data between the host and a Burn device.

use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{Backend as BurnBackend, Shape, TensorData, get_or_init_device_settings};
use switchyard_core::{DType, Error, HostTensor, Result};

/// Burn's name for a Switchyard float dtype.
pub fn burn_dtype(dtype: DType) -> burn_backend::DType {
    match dtype {
        DType::F32 => burn_backend::DType::F32,
        DType::F16 => burn_backend::DType::F16,
        DType::Bf16 => burn_backend::DType::BF16,
        // No Burn backend here lists int8 as a compute dtype, so weights never go up as it.
        DType::I8 => burn_backend::DType::I8,
    }
}

/// Uploads f32 values of the given shape as a float tensor.
pub fn floats<B: BurnBackend>(
    values: Vec<f32>,
    shape: &[usize],
    device: &B::Device,
) -> FloatTensor<B> {
    floats_as::<B>(values, shape, device, burn_backend::DType::F32)
}

/// Uploads f32 values of the given shape as a float tensor of `dtype`, converted on the host.
pub fn floats_as<B: BurnBackend>(
    values: Vec<f32>,
    shape: &[usize],
    device: &B::Device,
    dtype: burn_backend::DType,
) -> FloatTensor<B> {
    let data = TensorData::new(values, Shape::from(shape.to_vec()));
    let data = if dtype == burn_backend::DType::F32 { data } else { data.convert_dtype(dtype) };
    B::float_from_data(data, device)
}

/// Uploads a boolean mask of the given shape in the device's own boolean dtype. (Booleans go up
/// as 0/1 floats and are compared on the device: CubeCL backends store booleans as integers and
/// refuse host data of Rust `bool`s.)
pub fn bools<B: BurnBackend>(
    values: &[bool],
    shape: &[usize],
    device: &B::Device,
) -> BoolTensor<B> {
    let dtype = get_or_init_device_settings::<B>(device).bool_dtype;
    let ones = values.iter().map(|&b| f32::from(u8::from(b))).collect();
    B::float_greater_elem(floats::<B>(ones, shape, device), 0.5f32.into(), dtype)
}

/// Uploads indices as an int tensor of the device's default int dtype.
pub fn ints<B: BurnBackend>(values: Vec<i64>, device: &B::Device) -> IntTensor<B> {
    let n = values.len();
    let dtype = get_or_init_device_settings::<B>(device).int_dtype;
    let data = TensorData::new(values, Shape::from(vec![n])).convert_dtype(dtype.into());
    B::int_from_data(data, device)
}

/// A checkpoint tensor as f32 values (every supported dtype converts exactly).
pub fn host_f32(t: &HostTensor<'_>) -> Vec<f32> {
    let mut v = Vec::with_capacity(t.numel());
    t.extend_f32(&mut v);
    v
}

/// Reads a float tensor of any float dtype back to the host as f32 values.
pub fn read_f32<B: BurnBackend>(t: FloatTensor<B>) -> Result<Vec<f32>> {
    let data = burn_backend::try_read_sync(B::float_into_data(t))
        .ok_or_else(|| Error::Device("the device cannot be read synchronously here".into()))?
        .map_err(|e| Error::Device(format!("reading a result back failed: {e:?}")))?;
    data.try_into_vec_as::<f32>()
        .map_err(|e| Error::Device(format!("a result could not be converted to f32: {e:?}")))
}
