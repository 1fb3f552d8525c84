//! A task-storage map (`BPF_MAP_TYPE_TASK_STORAGE`): one value per task, kept by the kernel in
//! the task itself and freed with it. aya-ebpf 0.1.1 has no type for it, so this is one, in the
//! BTF-defined form (a `.maps` static whose field types encode the map's kind, key, value and
//! flags, as libbpf's `__uint`/`__type` do): the kernel requires the key and value types' BTF
//! for this kind of map, and aya (user space) creates BTF-defined maps with it.
//!
//! Finding the value costs a pointer walk from the task (`bpf_task_storage_get`), where a hash
//! map keyed by thread id costs a hash and a bucket walk per lookup.

use core::{ffi::c_void, ptr};

use aya_ebpf::{
    bindings::{bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, task_struct, BPF_F_NO_PREALLOC},
    helpers::gen::{bpf_get_current_task_btf, bpf_task_storage_get},
};

/// `BPF_LOCAL_STORAGE_GET_F_CREATE`: create the value (zeroed) if the task has none.
const F_CREATE: u64 = 1;

/// A task-storage map of `T` values. Declare it as a `#[btf_map]` static.
///
/// The fields are never read: their pointee types are the map's definition, as BTF (an
/// array's length is a number: `[i32; N]` says N). Task storage has no `max_entries` (0) and
/// must be created with `BPF_F_NO_PREALLOC`; its key (user space only) is a pidfd.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are null placeholders, never dereferenced; the kernel side reaches the
// map only through helpers.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    /// The map definition (all placeholders; the loader creates the map from the BTF).
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    /// The value of the running (current) task, if it has one.
    #[inline(always)]
    pub fn current(&self) -> Option<*mut T> {
        // SAFETY: a helper without arguments; its result is a valid task (or NULL).
        self.get(unsafe { bpf_get_current_task_btf() }, 0)
    }

    /// The value of `task`, if it has one.
    ///
    /// # Safety
    /// `task` is a task pointer the verifier accepts (a BTF `task_struct` pointer, or NULL).
    #[inline(always)]
    pub unsafe fn of(&self, task: *mut task_struct) -> Option<*mut T> {
        self.get(task, 0)
    }

    /// The value of `task`, created zeroed if it has none. `None` when the kernel could not
    /// allocate it (or while another task-storage operation runs on this CPU).
    ///
    /// # Safety
    /// As for [`TaskStorage::of`].
    #[inline(always)]
    pub unsafe fn of_or_zeroed(&self, task: *mut task_struct) -> Option<*mut T> {
        self.get(task, F_CREATE)
    }

    /// [`TaskStorage::of_or_zeroed`] for the running (current) task.
    #[inline(always)]
    pub fn current_or_zeroed(&self) -> Option<*mut T> {
        // SAFETY: as in `current`.
        self.get(unsafe { bpf_get_current_task_btf() }, F_CREATE)
    }

    #[inline(always)]
    fn get(&self, task: *mut task_struct, flags: u64) -> Option<*mut T> {
        let map = self as *const Self as *mut c_void;
        // SAFETY: `map` is this map; a NULL value with F_CREATE zero-fills a new one.
        let value = unsafe { bpf_task_storage_get(map, task, ptr::null_mut(), flags) };
        (!value.is_null()).then_some(value as *mut T)
    }
}
