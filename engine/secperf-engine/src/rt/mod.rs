//! The runtime every kind draws on: sockets and their options, the state a
//! test's threads share, the event loop of the many-connection kinds, pacing,
//! payloads, CPU accounting, clocks and kernel timestamps, AF_PACKET links,
//! the load frames' in-kernel counter, the guard on target addresses, and the
//! server's accept guard and memory budget.
//! Depends on `error` and `wire` only.

pub mod cpu;
pub mod evloop;
pub mod guard;
pub mod loadcount;
pub mod net;
pub mod pacing;
pub mod packet_tx;
pub mod payload;
pub mod shared;
pub mod sys;
pub mod target;
pub mod tls;
pub mod tstamp;
