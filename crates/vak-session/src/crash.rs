//! Crash points: where the crash-window tests kill a process between two
//! steps of a multi-step write, to prove each state a `SIGKILL` can leave
//! recovers to "delivered once" or "not delivered".
//!
//! In a debug build, `VAK_CRASH_AT=<step>` makes the process `SIGKILL`
//! itself when it reaches that step; a release build compiles every point
//! to nothing, so no environment can stop a deployed binary half-way.

/// Every step a crash point names, in the order a delivery reaches them:
/// what the tests iterate over, and what `VAK_CRASH_AT` may say.
pub const STEPS: &[&str] = &[
    // A chat's delivery that creates a session (first, rotation, rebind).
    "fresh-created",
    "fresh-event",
    "fresh-bound",
    "fresh-promoted",
    // Either kind of delivery, once its replay marker names its session.
    "marker-written",
    "marked",
    "turn-appended",
    "marker-committed",
    // PostgreSQL: the delivery's one transaction, before and after COMMIT.
    "transaction-written",
    "transaction-committed",
    // PostgreSQL: a batch of continuing deliveries' one transaction.
    "batch-written",
    "batch-committed",
];

/// Kill this process with `SIGKILL` when `VAK_CRASH_AT` names `step` (debug
/// builds only). `SIGKILL`, not a panic or `abort`: nothing of the
/// process's own runs after it, exactly as when an operator or the kernel
/// kills it.
#[inline]
pub fn point(step: &'static str) {
    #[cfg(debug_assertions)]
    if std::env::var_os("VAK_CRASH_AT").is_some_and(|at| at == step) {
        debug_assert!(STEPS.contains(&step), "crash point {step} is not in STEPS");
        // `kill` is the one way to send SIGKILL to oneself without unsafe
        // code; abort is the fallback should it be missing.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = step;
}
