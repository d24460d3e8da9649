//! The test spec: one JSON object whose `kind` picks the struct that holds it,
//! one struct per kind (each in its own module; those that run against a
//! server share `Common`). Parsing refuses unknown fields, fields that do not
//! apply to the kind (its struct has no such field) or to its protocol, and bad
//! values, each with an error that names the field and says what to do.
//!
//! The renamed fields `message`, `request` and `response` still accept their
//! old names (`message_size`, `request_size`, `response_size`); the resolved
//! spec uses the new ones.

mod common;
mod connections;
mod crr;
mod flood;
mod flows;
mod http;
mod latency;
mod mix;
mod resolved;
mod rr;
mod serving;
mod stream;

use std::net::IpAddr;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{EngineError, Result};
use crate::rt::guard::Peers;

pub(crate) use common::KindSpec;
pub use common::{Close, CloseOrder, Common, CpuGroup, Direction, Payload, Protocol};
pub use connections::check_helpers;
pub use connections::ConnectionsSpec;
pub use crr::CrrSpec;
pub use flood::{FloodSender, FloodSpec};
pub use flows::{FlowProto, FlowSpec, FlowsSpec, Listen, Role, ID_BYTES};
pub use http::HttpSpec;
pub use latency::{Duplex, LatencySpec, Timestamps};
pub use mix::{MixServer, MixSpec};
pub(crate) use resolved::Resolved;
pub use rr::RrSpec;
pub use stream::StreamSpec;

pub use crate::wire::ftp::Mode;
pub use crate::wire::packet::FloodProto;

use common::{fields_of, Names, OLD_NAMES};

/// One kind as the parser sees it.
struct Entry {
    name: &'static str,
    /// The fields its raw struct takes (aliases included).
    fields: fn() -> &'static [&'static str],
    parse: fn(&Map<String, Value>, &Names) -> Result<Spec>,
}

fn entry<K: KindSpec + Into<Spec>>() -> Entry {
    Entry {
        name: K::NAME,
        fields: fields_of::<K::Raw>,
        parse: |obj, names| parse_kind::<K>(obj, names).map(Into::into),
    }
}

fn short(s: &str) -> String {
    // serde's messages carry " at line 1 column 17"; the field already says where.
    match s.find(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

fn kind_names() -> String {
    let names: Vec<String> = kinds().iter().map(|k| format!("\"{}\"", k.name)).collect();
    let (last, rest) = names.split_last().expect("there are kinds");
    format!("{} or {}", rest.join(", "), last)
}

/// The fields a kind's spec may hold, for messages (old names left out).
fn listed(kind: &Entry) -> String {
    let mut v = vec!["kind"];
    v.extend(
        (kind.fields)()
            .iter()
            .filter(|f| !OLD_NAMES.iter().any(|(old, _)| old == *f)),
    );
    v.join(", ")
}

fn not_for(field: &str, kind: &str, protocol: Option<Protocol>) -> EngineError {
    let over = protocol.map_or(String::new(), |p| format!(" over {}", p.name()));
    EngineError::spec(
        field,
        format!(
            "`{}` does not apply to kind {}{}: remove it",
            field, kind, over
        ),
    )
}

/// Reads kind `K` from the spec's fields (`kind` left out): its protocol
/// first, then which given fields it refuses, then the values.
fn parse_kind<K: KindSpec>(obj: &Map<String, Value>, names: &Names) -> Result<K> {
    let protocol = K::PROTOCOL.map(|default| {
        obj.get("protocol")
            .and_then(|p| serde_json::from_value(p.clone()).ok())
            .unwrap_or(default)
    });
    let fields = fields_of::<K::Raw>();
    for (key, v) in obj {
        if v.is_null() {
            continue;
        }
        if !fields.contains(&key.as_str()) {
            return Err(not_for(key, K::NAME, protocol));
        }
        let only = K::PROTOCOL_ONLY.iter().find(|(f, _)| f == key);
        if let (Some((_, needs)), Some(p)) = (only, protocol) {
            if *needs != p {
                return Err(not_for(key, K::NAME, protocol));
            }
        }
    }
    let raw: K::Raw =
        serde_path_to_error::deserialize(&Value::Object(obj.clone())).map_err(|e| {
            let field = e.path().to_string();
            let inner = short(&e.inner().to_string());
            EngineError::Spec {
                message: format!("`{}` is malformed: {}; fix its value", field, inner),
                field: Some(field),
            }
        })?;
    K::resolve(raw, names)
}

impl Spec {
    /// Parses a spec given as JSON text.
    pub fn parse(text: &str) -> Result<Spec> {
        let value: Value = serde_json::from_str(text).map_err(|e| EngineError::Spec {
            field: None,
            message: format!(
                "the spec is not valid JSON ({}): give one JSON object such as \
                 {{\"kind\":\"stream\",\"server\":\"198.18.2.2:5201\"}}",
                e
            ),
        })?;
        Spec::from_value(value)
    }

    /// Parses and checks a spec given as a JSON value.
    pub fn from_value(value: Value) -> Result<Spec> {
        let Value::Object(mut obj) = value else {
            return Err(EngineError::Spec {
                field: None,
                message: "the spec must be a JSON object such as {\"kind\":\"rr\",\"server\":\"198.18.2.2:5201\"}".into(),
            });
        };
        let given = obj.clone();
        let kinds = kinds();
        let kind = obj.remove("kind").filter(|k| !k.is_null());
        let entry = kind
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|k| kinds.iter().find(|e| e.name == k));
        // A field no kind takes is unknown, whatever the kind.
        for key in obj.keys() {
            if !kinds.iter().any(|e| (e.fields)().contains(&key.as_str())) {
                let known = match entry {
                    Some(e) => listed(e),
                    None => kinds.iter().map(listed).collect::<Vec<_>>().join("; "),
                };
                return Err(EngineError::spec(
                    key,
                    format!(
                        "unknown field `{}`: remove it or use one of: {}",
                        key, known
                    ),
                ));
            }
        }
        let entry = match (&kind, entry) {
            (_, Some(e)) => e,
            (None, _) => {
                return Err(EngineError::spec(
                    "kind",
                    format!("`kind` is required: set it to {}", kind_names()),
                ))
            }
            (Some(k), None) => {
                return Err(EngineError::spec(
                    "kind",
                    format!("`kind` {} is not a kind: set it to {}", k, kind_names()),
                ))
            }
        };
        let given_key = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
        for (old, new) in OLD_NAMES {
            if given_key(old) && given_key(new) {
                return Err(EngineError::spec(
                    old,
                    format!(
                        "`{}` is the old name of `{}`: give one of them, not both",
                        old, new
                    ),
                ));
            }
        }
        let names = Names::new(given_key);
        let mut spec = (entry.parse)(&obj, &names)?;
        if let Spec::Mix(m) = &mut spec {
            m.given = Value::Object(given);
        }
        spec.check_server_bounds()?;
        Ok(spec)
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.name()
    }

    /// How long a test of this spec lasts at most: its warm-up and duration
    /// (connections: its phases; a mix: its timeouts bound it, not a time).
    pub fn total_seconds(&self) -> f64 {
        self.resolved().total_seconds()
    }

    /// Every address this spec can make the engine send to, each with the
    /// field that names it: the server (control and data), a latency test's
    /// `destinations`, a flood's `target`, a mix's servers and SOCKS proxy.
    /// Local addresses (`bind`, latency `sources`) are not targets.
    pub fn targets(&self) -> Vec<(String, IpAddr)> {
        self.resolved().targets()
    }

    /// The target guard: refuses the spec if any of its `targets` is outside
    /// the testbed ranges and loopback, unless `allow_any`; a flood's target
    /// and sources are checked with no override.
    pub fn check_targets(&self, allow_any: bool) -> Result<()> {
        self.resolved().check_targets(allow_any)
    }

    /// Refuses a socket buffer (or stream `rcvlowat`) above what this host's
    /// sysctls allow (the kernel would silently clamp it).
    pub fn check_local_limits(&self) -> Result<()> {
        self.resolved().check_local_limits()
    }
}

/// What the spec asks of the server that serves it (spec/serving.rs).
impl Spec {
    /// The addresses the spec declares its data comes from, besides the
    /// control connection's peer, each with the field that names it: `bind`,
    /// `sources` (latency, connections) and `peers` (the same through a NAT).
    pub fn declared_sources(&self) -> Vec<serving::Declared> {
        self.resolved().declared_sources()
    }

    /// The sources a server serves for this test: `peer`, the control
    /// connection's, and the declared ones (in the testbed ranges unless
    /// `allow_any`).
    pub fn served_peers(&self, peer: IpAddr, allow_any: bool) -> Result<Peers> {
        serving::served(peer, self.declared_sources(), allow_any)
    }

    /// How many data connections the test opens to the server in all (None:
    /// not counted: UDP, or crr, whose server serves one connection at a time
    /// per accepting thread).
    pub fn data_connections(&self) -> Option<u64> {
        self.resolved().data_connections()
    }

    /// The memory the server's side of this test holds (its buffers, as the
    /// spec sizes them): what the server reserves for it at `setup`.
    pub fn server_memory(&self) -> u64 {
        self.resolved().server_need().bytes
    }

    /// Refuses a spec whose server side would hold more than
    /// rt::guard::MAX_TEST_MEMORY, or start more than MAX_HELPERS helpers.
    pub fn check_server_bounds(&self) -> Result<()> {
        serving::check_need(&self.resolved().server_need())?;
        self.resolved().check_server_extra()
    }
}

/// The one list of kinds: the `Spec` enum, the parser's entries (in the order
/// messages list them), `From` each kind's spec, and the dispatch to its
/// `Resolved` impl and its `KindSpec` come from it. A new kind is a line here,
/// its spec module, and its runner (kinds/).
macro_rules! kinds {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// A resolved spec: every default filled in, every value checked. Serialized
        /// (`to_value`) as one object tagged by `kind`.
        #[derive(Clone, Debug, Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum Spec {
            $($variant($ty),)*
        }

        /// Every kind, in the order messages list them.
        fn kinds() -> Vec<Entry> {
            vec![$(entry::<$ty>(),)*]
        }

        $(impl From<$ty> for Spec {
            fn from(s: $ty) -> Spec {
                Spec::$variant(s)
            }
        })*

        impl Spec {
            /// The kind's answers to what the engine asks of a spec.
            fn resolved(&self) -> &dyn Resolved {
                match self {
                    $(Spec::$variant(s) => s,)*
                }
            }

            fn name(&self) -> &'static str {
                match self {
                    $(Spec::$variant(_) => <$ty as KindSpec>::NAME,)*
                }
            }

            /// The resolved spec as the records and the server see it: `kind` and the
            /// fields that apply to the kind over its protocol.
            pub fn to_value(&self) -> Value {
                match self {
                    $(Spec::$variant(s) => s.to_value(),)*
                }
            }
        }
    };
}

kinds!(
    Stream(StreamSpec),
    Rr(RrSpec),
    Crr(CrrSpec),
    Latency(LatencySpec),
    Http(HttpSpec),
    Connections(ConnectionsSpec),
    Flood(FloodSpec),
    Mix(MixSpec),
    Flows(FlowsSpec),
);
