//! The run as a process: the sandbox started (`start`), the services it serves from outside and
//! their stop (`services`), the run's cgroup, the terminal relay and event loop, and how the run
//! ended. May import the runbook engine, the agent's state, the network services and the way
//! out, and everything below the supervisor.

pub mod cgroup;
mod error;
pub mod outcome;
mod prepare;
pub mod pty;
pub mod relay;
pub mod services;
pub mod start;
