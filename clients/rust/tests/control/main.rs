//! The job-control API beyond the conformance scenarios, against a real server: progress
//! and results the server refuses, cancel and expiry, the GroupService wrappers.

#[path = "../support/mod.rs"]
mod support;

mod cancel;
mod groups;
mod progress;
