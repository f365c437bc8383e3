//! Locks the storages one op touches — each once, in id order, so two ops on two threads can
//! never deadlock — and hands out raw base pointers. The output's storage is write-locked;
//! an input that is the output's own storage reads through the same pointer.

use crate::backend::View;
use crate::storage::{Storage, StorageData};
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

#[allow(dead_code)] // the guards are held for their lifetime, not read
enum Guard<'a> {
    Read(RwLockReadGuard<'a, StorageData>),
    Write(RwLockWriteGuard<'a, StorageData>),
}

pub(crate) struct Access<'a> {
    entries: Vec<(u64, *mut u8)>,
    _guards: Vec<Guard<'a>>,
}

impl<'a> Access<'a> {
    /// Write-locks `out` (if any) and read-locks every other distinct storage of `ins`.
    pub fn new(out: Option<&'a Storage>, ins: &[&'a Storage]) -> Access<'a> {
        let mut all: Vec<(&'a Storage, bool)> = Vec::new();
        if let Some(o) = out {
            all.push((o, true));
        }
        for s in ins {
            if !all.iter().any(|(t, _)| t.id() == s.id()) {
                all.push((s, false));
            }
        }
        all.sort_by_key(|(s, _)| s.id());
        let mut entries = Vec::with_capacity(all.len());
        let mut guards = Vec::with_capacity(all.len());
        for (s, write) in all {
            if write {
                let mut g = s.write();
                let StorageData::Cpu(buf) = &mut *g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_mut_ptr()));
                guards.push(Guard::Write(g));
            } else {
                let g = s.read();
                let StorageData::Cpu(buf) = &*g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_ptr() as *mut u8));
                guards.push(Guard::Read(g));
            }
        }
        Access {
            entries,
            _guards: guards,
        }
    }

    /// Like [`Access::new`] for ops with several outputs (sort's values and indices): every
    /// storage of `outs` is write-locked, every other one of `ins` read-locked.
    pub fn new_outs(outs: &[&'a Storage], ins: &[&'a Storage]) -> Access<'a> {
        let mut all: Vec<(&'a Storage, bool)> = Vec::new();
        for (s, write) in outs
            .iter()
            .map(|s| (s, true))
            .chain(ins.iter().map(|s| (s, false)))
        {
            if !all.iter().any(|(t, _)| t.id() == s.id()) {
                all.push((s, write));
            }
        }
        all.sort_by_key(|(s, _)| s.id());
        let mut entries = Vec::with_capacity(all.len());
        let mut guards = Vec::with_capacity(all.len());
        for (s, write) in all {
            if write {
                let mut g = s.write();
                let StorageData::Cpu(buf) = &mut *g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_mut_ptr()));
                guards.push(Guard::Write(g));
            } else {
                let g = s.read();
                let StorageData::Cpu(buf) = &*g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_ptr() as *mut u8));
                guards.push(Guard::Read(g));
            }
        }
        Access {
            entries,
            _guards: guards,
        }
    }

    /// Locks the storages of views: `out` for writing, `ins` for reading.
    pub fn views(out: Option<&View<'a>>, ins: &[&View<'a>]) -> Access<'a> {
        let ins: Vec<&'a Storage> = ins.iter().map(|v| v.storage).collect();
        Access::new(out.map(|v| v.storage), &ins)
    }

    /// Write-locks every storage of `outs` and read-locks every other distinct storage of
    /// `ins` (ops with several outputs, e.g. values and indices), each once, in id order.
    pub fn outputs(outs: &[&'a Storage], ins: &[&'a Storage]) -> Access<'a> {
        let mut all: Vec<(&'a Storage, bool)> = Vec::new();
        for (s, write) in outs
            .iter()
            .map(|s| (s, true))
            .chain(ins.iter().map(|s| (s, false)))
        {
            if !all.iter().any(|(t, _)| t.id() == s.id()) {
                all.push((s, write));
            }
        }
        all.sort_by_key(|(s, _)| s.id());
        let mut entries = Vec::with_capacity(all.len());
        let mut guards = Vec::with_capacity(all.len());
        for (s, write) in all {
            if write {
                let mut g = s.write();
                let StorageData::Cpu(buf) = &mut *g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_mut_ptr()));
                guards.push(Guard::Write(g));
            } else {
                let g = s.read();
                let StorageData::Cpu(buf) = &*g else {
                    unreachable!("backend dispatch sends only CPU storages here")
                };
                entries.push((s.id(), buf.as_ptr() as *mut u8));
                guards.push(Guard::Read(g));
            }
        }
        Access {
            entries,
            _guards: guards,
        }
    }

    /// Base pointer (element 0 of the storage) of a locked storage, typed.
    pub fn ptr<T>(&self, s: &Storage) -> *mut T {
        self.entries
            .iter()
            .find(|(id, _)| *id == s.id())
            .expect("storage was locked")
            .1 as *mut T
    }
}
