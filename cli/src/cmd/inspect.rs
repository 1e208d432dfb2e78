//! `numprobe inspect <tensor-file>`: dtype, shape and byte count of a `.pt` or `.npy` file, as one
//! JSON object, read from the header alone.

use super::CmdResult;
use dumpfmt::tensor::FileInfo;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A `.pt` (torch.save) or `.npy` file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> CmdResult {
    let obj = match dumpfmt::tensor::inspect(&args.file)? {
        FileInfo::Tensor(info) => json!({
            "file": args.file.display().to_string(),
            "dtype": info.dtype.torch_name().trim_start_matches("torch."),
            "torch_dtype": info.dtype.torch_name(),
            "mindspore_dtype": info.dtype.mindspore_name(),
            "shape": info.shape,
            "numel": info.numel(),
            "nbytes": info.nbytes,
        }),
        FileInfo::NpyText {
            descr,
            shape,
            nbytes,
        } => json!({
            "file": args.file.display().to_string(),
            "dtype": descr,
            "shape": shape,
            "numel": shape.iter().map(|&d| d as u64).product::<u64>(),
            "nbytes": nbytes,
        }),
    };
    println!("{}", serde_json::to_string_pretty(&obj)?);
    Ok(ExitCode::SUCCESS)
}
