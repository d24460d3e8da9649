//! The `secperf-engine` binary: parses the command line, calls the library,
//! and turns any failure into an `error` record (last line) and exit code.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use secperf_engine::{
    parse_port_range, EngineError, ErrorRecord, Record, ServeOptions, Server, Sink, Spec,
    StdoutSink, FORMAT, VERSION,
};

#[derive(Parser, Debug)]
#[command(
    name = "secperf-engine",
    version,
    about = "secperf data plane: serve tests or run one"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve tests on a control address until SIGTERM/SIGINT.
    Serve {
        /// Control address, e.g. 0.0.0.0:5201 or [::]:5201.
        #[arg(long)]
        listen: SocketAddr,
        /// Range for server-chosen data ports, e.g. 5300-5399.
        #[arg(long)]
        data_ports: Option<String>,
        /// Accept control connections from outside the testbed ranges.
        #[arg(long)]
        allow_any_target: bool,
    },
    /// Run one test; the spec is JSON or @FILE.
    Run {
        #[arg(long)]
        spec: String,
        /// Allow a server outside 198.18.0.0/15, 2001:2::/48 and loopback.
        #[arg(long)]
        allow_any_target: bool,
    },
    /// Print the engine's version.
    Version,
    /// A helper process of a test the engine spreads over several processes
    /// (started by secperf-engine itself; its job is JSON).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        job: String,
    },
}

fn fail(began: Instant, e: &EngineError) -> ExitCode {
    let t = began.elapsed().as_secs_f64();
    StdoutSink.emit(Record::Error(ErrorRecord::from_error(t, e)));
    eprintln!("secperf-engine: {}", e);
    ExitCode::from(e.exit_code() as u8)
}

fn load_spec(arg: &str) -> Result<Spec, EngineError> {
    let text = match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| EngineError::Spec {
            field: None,
            message: format!(
                "cannot read the spec file {}: {}; give an existing file after @",
                path, e
            ),
        })?,
        None => arg.to_string(),
    };
    Spec::parse(&text)
}

fn serve(
    listen: SocketAddr,
    data_ports: Option<String>,
    allow_any_target: bool,
) -> Result<(), EngineError> {
    let data_ports = data_ports.as_deref().map(parse_port_range).transpose()?;
    let server = Server::bind(ServeOptions {
        listen,
        data_ports,
        allow_any_target,
    })?;
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, shutdown.clone())
            .map_err(EngineError::io("cannot install the SIGTERM/SIGINT handler"))?;
    }
    server.run(&shutdown, &mut StdoutSink)
}

fn main() -> ExitCode {
    let began = Instant::now();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{}", e);
                return ExitCode::SUCCESS;
            }
            let first = e
                .to_string()
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .to_string();
            let err = EngineError::Spec {
                field: None,
                message: format!(
                    "{}: see `secperf-engine --help`",
                    first.trim_start_matches("error: ")
                ),
            };
            return fail(began, &err);
        }
    };
    let r = match cli.command {
        Command::Version => {
            println!(
                "{{\"engine\":\"secperf-engine\",\"version\":\"{}\",\"format\":{}}}",
                VERSION, FORMAT
            );
            Ok(())
        }
        Command::Serve {
            listen,
            data_ports,
            allow_any_target,
        } => serve(listen, data_ports, allow_any_target),
        Command::Run {
            spec,
            allow_any_target,
        } => load_spec(&spec)
            .and_then(|s| secperf_engine::run(s, allow_any_target, began, &mut StdoutSink)),
        Command::Worker { job } => secperf_engine::worker(&job),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(began, &e),
    }
}
