//! Plans printed as tables for people (`switchyard inspect`).

use std::fmt::Write as _;

use crate::PlanRecord;

impl PlanRecord {
    /// The plan as a readable table with totals, for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let [t, q, m] = self.bucket;
        let _ = writeln!(s, "plan for bucket {t} tokens, {q} sequences, {m} markers");
        let _ = writeln!(
            s,
            "{:>4}  {:<10} {:<34} {:<24} {:>14} {:>10} {:>10}",
            "#", "op", "detail", "inputs", "output", "MFLOP", "MB"
        );
        for o in &self.ops {
            let ins: Vec<String> = o.inputs.iter().map(|d| format!("{}x{}", d[0], d[1])).collect();
            let _ = writeln!(
                s,
                "{:>4}  {:<10} {:<34} {:<24} {:>14} {:>10.2} {:>10.3}",
                o.index,
                o.op,
                o.detail,
                ins.join(" "),
                format!("{}x{}", o.output[0], o.output[1]),
                o.flops as f64 / 1e6,
                o.bytes as f64 / 1e6,
            );
        }
        let _ = writeln!(
            s,
            "total: {} ops, {:.1} MFLOP, {:.1} MB moved; arena {:.2} MB ({:.2} MB without sharing)",
            self.ops.len(),
            self.flops as f64 / 1e6,
            self.bytes as f64 / 1e6,
            self.arena_bytes as f64 / 1e6,
            self.unshared_bytes as f64 / 1e6,
        );
        s
    }
}
