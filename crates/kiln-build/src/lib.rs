//! Compiling kernel modules with the pinned toolchain.
//!
//! [`plan`] turns pins and source trees ([`compile::Plan`]) into [`job::Job`]s (one per module and
//! target; [`hip`] and [`cuda`] say exactly how each is compiled), [`run`]
//! runs them in parallel as one graph, with the in-process steps that read
//! their outputs ([`run::Step`]: bundling ([`bundle`]), compressing, ...),
//! against the content-addressed [`store`], keyed by everything that can
//! change an output ([`job::Job::recipe`], with the files found by [`scan`]).
//! Kernel sources come from [`upstream`].

pub mod bundle;
pub mod compile;
pub mod cuda;
pub mod hip;
pub mod job;
pub mod plan;
pub mod run;
pub mod scan;
pub mod store;
pub mod upstream;

pub use compile::Plan;
pub use job::{Arch, Backend, Job, JobKind};
pub use run::{run_all, run_graph, Built, Failed, Node, Options, Step, StepFn, StepIo, Work};
