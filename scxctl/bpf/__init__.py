"""BPF plumbing: raw bpf(2) calls, and libbpf loading of the pyland object."""
