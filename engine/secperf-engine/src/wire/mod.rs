//! What crosses a process boundary: the records on stdout, the control
//! protocol between client and server, and the bytes of data-path frames,
//! probes and the HTTP/FTP/SOCKS dialogues. Depends on `error` only and names
//! no kind: a kind's own record payloads are plain data here, built by the kind.

pub mod control;
pub mod frame;
pub mod ftp;
pub mod http;
pub mod packet;
pub mod probe;
pub mod record;
pub mod socks;
