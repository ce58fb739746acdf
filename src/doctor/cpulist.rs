//! Linux CPU lists (`0-3,8,10-11`): parsing and printing.
//!
//! Owns the one format that `--cores`, `/proc/cmdline` (`isolcpus=`, `nohz_full=`,
//! `rcu_nocbs=`), `/sys/devices/system/cpu/online` and `/proc/irq/*/smp_affinity_list`
//! share. Parsing never panics; ranges wider than [`MAX_CPUS`] are refused so that a
//! hostile `0-4294967295` cannot allocate gigabytes.

use std::collections::BTreeSet;
use std::fmt;

/// Linux's own ceiling on CPU numbers (`NR_CPUS` tops out at 8192).
pub const MAX_CPUS: u32 = 8192;

/// A set of CPU numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// Parses a CPU list. Empty text is the empty set. A kernel stride (`0-7:2/4`) is
    /// understood; anything else that is not a number or range is an error.
    pub fn parse(text: &str) -> Result<CpuSet, String> {
        let mut set = BTreeSet::new();
        for part in text
            .trim()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (range, stride) = match part.split_once(':') {
                Some((range, stride)) => (range, Some(stride)),
                None => (part, None),
            };
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (cpu_number(a, part)?, cpu_number(b, part)?),
                None => {
                    let n = cpu_number(range, part)?;
                    (n, n)
                }
            };
            if first > last {
                return Err(format!("`{part}`: range runs backwards"));
            }
            let (used, group) = match stride {
                None => (1, 1),
                Some(stride) => {
                    let (u, g) = stride
                        .split_once('/')
                        .ok_or_else(|| format!("`{part}`: stride is not used/group"))?;
                    let used: u32 = u
                        .trim()
                        .parse()
                        .map_err(|_| format!("`{part}`: bad stride"))?;
                    let group: u32 = g
                        .trim()
                        .parse()
                        .map_err(|_| format!("`{part}`: bad stride"))?;
                    if used == 0 || group == 0 || used > group {
                        return Err(format!("`{part}`: bad stride"));
                    }
                    (used, group)
                }
            };
            set.extend((first..=last).filter(|cpu| (cpu - first) % group < used));
        }
        Ok(CpuSet(set))
    }

    pub fn of(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        CpuSet(cpus.into_iter().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }
}

fn cpu_number(text: &str, part: &str) -> Result<u32, String> {
    let n: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{part}` is not a CPU number or range"))?;
    if n >= MAX_CPUS {
        return Err(format!(
            "`{part}`: CPU {n} is beyond Linux's limit of {MAX_CPUS}"
        ));
    }
    Ok(n)
}

/// Prints the compact form: `0-3,8,10-11`; the empty set prints as nothing.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.0.iter().copied().peekable();
        let mut first_range = true;
        while let Some(start) = cpus.next() {
            let mut end = start;
            while cpus.peek() == Some(&(end + 1)) {
                end += 1;
                cpus.next();
            }
            if !first_range {
                f.write_str(",")?;
            }
            first_range = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "cpulist_tests.rs"]
mod tests;
