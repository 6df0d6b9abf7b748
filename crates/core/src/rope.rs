//! The angles of [`Op::Rope`](crate::Op::Rope), in one place so every backend rotates by the
//! same numbers.

/// The angle of frequency `i < head_dim / 2` at position `p`:
/// `p * position_scale * theta^(-2i / head_dim)`, in f64 so long positions keep their accuracy.
pub fn rope_angle(p: usize, i: usize, head_dim: usize, theta: f32, position_scale: f32) -> f64 {
    let freq = f64::from(theta).powf(-2.0 * i as f64 / head_dim as f64);
    p as f64 * f64::from(position_scale) * freq
}

/// The `[positions, head_dim / 2]` cosine and sine tables of [`rope_angle`], stored in f32.
pub fn rope_tables(
    positions: usize,
    head_dim: usize,
    theta: f32,
    position_scale: f32,
) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for p in 0..positions {
        for i in 0..half {
            let (s, c) = rope_angle(p, i, head_dim, theta, position_scale).sin_cos();
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angles_follow_the_documented_formula() {
        // theta 100, head_dim 4: frequencies 1 and 1/10.
        assert_eq!(rope_angle(3, 0, 4, 100.0, 1.0), 3.0);
        assert!((rope_angle(3, 1, 4, 100.0, 1.0) - 0.3).abs() < 1e-15);
        // The position scale multiplies every angle.
        assert!((rope_angle(3, 1, 4, 100.0, 0.5) - 0.15).abs() < 1e-15);
        let (cos, sin) = rope_tables(2, 4, 100.0, 0.5);
        assert_eq!(cos.len(), 4);
        assert_eq!((cos[0], sin[0]), (1.0, 0.0));
        assert_eq!((cos[2], sin[3]), (0.5f64.cos() as f32, 0.05f64.sin() as f32));
    }
}
