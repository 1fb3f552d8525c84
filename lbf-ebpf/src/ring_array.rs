//! An array of ring buffers (`BPF_MAP_TYPE_ARRAY_OF_MAPS` whose inner maps are
//! `BPF_MAP_TYPE_RINGBUF`), in the BTF-defined form: aya-ebpf 0.1.1 has no type for maps of
//! maps. The `values` field's pointee is the inner maps' template, as libbpf's
//! `__array(values, ...)` encodes it; user space creates the ring buffers and puts them in.

use core::{ffi::c_void, ptr};

use aya_ebpf::{
    bindings::bpf_map_type::{BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_RINGBUF},
    helpers::gen::bpf_map_lookup_elem,
};

/// The template of the inner maps: a ring buffer (its size here is a placeholder: the kernel
/// does not compare inner maps' sizes with the template's).
#[repr(C)]
pub struct RingTemplate {
    r#type: *const [i32; BPF_MAP_TYPE_RINGBUF as usize],
    max_entries: *const [i32; 4096],
}

/// An array of `N` ring buffers. Declare it as a `#[btf_map]` static. The fields are never
/// read: their types are the map's definition, as BTF.
#[repr(C)]
pub struct RingArray<const N: usize> {
    r#type: *const [i32; BPF_MAP_TYPE_ARRAY_OF_MAPS as usize],
    key: *const u32,
    max_entries: *const [i32; N],
    values: [*const RingTemplate; 0],
}

// SAFETY: the fields are null placeholders, never dereferenced; the kernel side reaches the
// map only through helpers.
unsafe impl<const N: usize> Sync for RingArray<N> {}

impl<const N: usize> RingArray<N> {
    /// The map definition (all placeholders; the loader creates the map from the BTF).
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            max_entries: ptr::null(),
            values: [],
        }
    }

    /// The ring buffer at `index`, as a map pointer for the ring buffer helpers; `None` for an
    /// empty slot or an index out of range.
    #[inline(always)]
    pub fn get(&self, index: u32) -> Option<*mut c_void> {
        let map = self as *const Self as *mut c_void;
        // SAFETY: `map` is this map and the key a `u32` on the stack.
        let ring = unsafe { bpf_map_lookup_elem(map, &index as *const u32 as *const c_void) };
        (!ring.is_null()).then_some(ring)
    }
}
