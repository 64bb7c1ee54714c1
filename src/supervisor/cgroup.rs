//! The run's cgroup: memory, process and CPU limits for everything the sandbox starts (being
//! written).
