//! Apache Curator (Java), from Debian's jars (`libcurator-recipes-java`): the library
//! our ZooKeeper lock must interoperate with (`app/tests/api/curator.rs`) and is
//! measured against (`locks/benches`). Compiles a small Java program against the jars
//! and gives the classpath to run it with.

use crate::process::find_binary;
use crate::{Error, Result};
use std::path::Path;
use std::process::Command;

/// Curator's `InterProcessMutex` and what it needs at run time, under /usr/share/java.
pub const JARS: [&str; 8] = [
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

/// `classes` (a directory of compiled classes) followed by Curator's jars.
pub fn classpath(classes: &Path) -> String {
    let mut parts = vec![classes.display().to_string()];
    parts.extend(JARS.iter().map(|jar| format!("/usr/share/java/{jar}.jar")));
    parts.join(":")
}

/// Compiles `source` into `out` (created when missing) against Curator's jars and
/// returns the classpath to run its classes with (`java -cp <it> Main ...`).
pub fn compile(source: &Path, out: &Path) -> Result<String> {
    for jar in JARS {
        let path = format!("/usr/share/java/{jar}.jar");
        if !Path::new(&path).exists() {
            return Err(Error::MissingBinary {
                what: path,
                package: "libcurator-recipes-java",
            });
        }
    }
    let javac = find_binary("javac", "default-jdk-headless")?;
    std::fs::create_dir_all(out).map_err(Error::io(format!("creating {}", out.display())))?;
    let classpath = classpath(out);
    let output = Command::new(javac)
        .args(["-cp", &classpath, "-d"])
        .arg(out)
        .arg(source)
        .output()
        .map_err(Error::io("running javac"))?;
    if !output.status.success() {
        return Err(Error::Command {
            what: format!("javac {}", source.display()),
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(classpath)
}
