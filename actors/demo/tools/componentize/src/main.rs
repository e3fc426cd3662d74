//! `componentize IN.wasm OUT.wasm [IN.wasm OUT.wasm …]`: encodes each core module as a component.
//!
//! The guests target `wasm32-unknown-unknown`, so their modules import nothing from WASI and
//! need no adapter: the component is the module plus the world wit-bindgen embedded in it.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.len() % 2 != 0 {
        eprintln!("usage: componentize IN.wasm OUT.wasm [IN.wasm OUT.wasm …]");
        return ExitCode::from(2);
    }
    for pair in args.chunks(2) {
        if let Err(e) = componentize(&pair[0], &pair[1]) {
            eprintln!("componentize: {}: {e:#}", pair[0]);
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn componentize(input: &str, output: &str) -> Result<(), Box<dyn std::error::Error>> {
    let module = std::fs::read(input)?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .encode()?;
    std::fs::write(output, component)?;
    Ok(())
}
