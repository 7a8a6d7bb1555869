//! The release (docs/release.md), as `make release-check` builds it into target/release-check-dist: the same steps
//! as `make release` with unoptimised binaries and no SBOM. The operator image's archive holds one image per
//! architecture, each with its static binary, non-root user, entrypoint and OCI labels; the amd64 binary runs; each
//! image carries the project's licence and the third-party notices of every crate its binary embeds (cargo-auditable's
//! dependency list, read from the binary); the chart package lints and renders the image every install path names;
//! the bundle image carries that image too; the checksums hold.
//!
//! `#[ignore]`d ("needs make release-check"): `make release-check` builds the release, then runs this. The release
//! workflow runs it on `make release`'s dist/ too (`NEURON_DRA_RELEASE_DIR`), before anything is published.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod tools;
}

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use support::cluster::repo;
use support::docs;
use support::tools::{run, temp_dir, tool};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const BINARY: &str = "neuron-dra-operator";
const USER: &str = "65532:65532";

fn out_dir() -> PathBuf {
    let dir =
        std::env::var_os("NEURON_DRA_RELEASE_DIR").map_or_else(|| repo("target/release-check-dist"), PathBuf::from);
    assert!(dir.join("SHA256SUMS").exists(), "no release in {}: run `make release-check`", dir.display());
    dir
}

fn yaml(path: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
}

/// The image every install path names: config/manager's kustomization, the one place it is written.
fn operator_image() -> String {
    let entry = &yaml("config/manager/kustomization.yaml")["images"][0];
    format!("{}:{}", entry["newName"].as_str().unwrap(), entry["newTag"].as_str().unwrap())
}

fn sh(program: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program).args(args).current_dir(dir).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An OCI image layout unpacked from an archive.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn unpack(archive: &Path, name: &str) -> Layout {
        assert!(archive.exists(), "{} is missing", archive.display());
        let dir = temp_dir(name);
        sh("tar", &["-xf", archive.to_str().unwrap(), "-C", dir.to_str().unwrap()], &dir);
        Layout { dir }
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        let (algorithm, hex) = digest.split_once(':').unwrap();
        self.dir.join("blobs").join(algorithm).join(hex)
    }

    fn json(&self, digest: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.blob_path(digest)).unwrap()).unwrap()
    }

    fn index(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("index.json")).unwrap()).unwrap()
    }

    /// The file at `path` in the image of `manifest` (its one layer), extracted into `into`.
    fn file(&self, manifest: &Value, path: &str, into: &Path) -> PathBuf {
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "one layer: {manifest}");
        let layer = self.blob_path(layers[0]["digest"].as_str().unwrap());
        std::fs::create_dir_all(into).unwrap();
        sh("tar", &["-xf", layer.to_str().unwrap(), "-C", into.to_str().unwrap(), path], into);
        into.join(path)
    }
}

/// The archive's one entry, named `reference`, and the manifest (or index) it points to.
fn entry(layout: &Layout, reference: &str) -> Value {
    let index = layout.index();
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(manifests[0]["annotations"]["org.opencontainers.image.ref.name"], reference, "{index}");
    layout.json(manifests[0]["digest"].as_str().unwrap())
}

#[test]
#[ignore = "needs make release-check"]
fn the_operator_image_holds_a_static_non_root_binary_per_architecture() {
    let layout = Layout::unpack(&out_dir().join(format!("{BINARY}-{VERSION}.oci.tar")), "release-operator");
    let list = entry(&layout, &operator_image());
    assert_eq!(list["mediaType"], "application/vnd.oci.image.index.v1+json", "a multi-architecture index");
    let mut seen = Vec::new();
    for image in list["manifests"].as_array().unwrap() {
        let arch = image["platform"]["architecture"].as_str().unwrap().to_string();
        assert_eq!(image["platform"]["os"], "linux");
        let manifest = layout.json(image["digest"].as_str().unwrap());
        let config = layout.json(manifest["config"]["digest"].as_str().unwrap());
        assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some(arch.as_str())));
        let run_config = &config["config"];
        assert_eq!(run_config["User"], USER, "{arch}: non-root");
        assert_eq!(run_config["Entrypoint"], serde_json::json!([format!("/{BINARY}")]), "{arch}");
        assert_eq!(run_config["Cmd"], serde_json::json!(["run"]), "{arch}");
        let labels = &run_config["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], VERSION, "{arch}: {labels}");
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0", "{arch}: {labels}");
        for label in ["source", "revision", "title"] {
            let value = labels[format!("org.opencontainers.image.{label}")].as_str().unwrap_or_default();
            assert!(!value.is_empty() && value != "unknown", "{arch}: label {label} is {value:?}");
        }

        let binary = layout.file(&manifest, BINARY, &layout.dir.join(format!("rootfs-{arch}")));
        let described = sh("file", &["-b", binary.to_str().unwrap()], &layout.dir);
        let machine = if arch == "arm64" { "ARM aarch64" } else { "x86-64" };
        assert!(described.contains(machine) && described.contains("statically linked"), "{arch}: {described}");
        if arch == "amd64" && std::env::consts::ARCH == "x86_64" {
            let version = sh(binary.to_str().unwrap(), &["--version"], &layout.dir);
            // The binary was built from the commit the image's label names (its build_info metric says the same).
            let revision = labels["org.opencontainers.image.revision"].as_str().unwrap();
            assert_eq!(version.trim(), format!("{BINARY} {VERSION} (revision {revision})"));
        }
        seen.push(arch);
    }
    seen.sort();
    assert_eq!(seen, ["amd64", "arm64"]);
}

#[test]
#[ignore = "needs make release-check"]
fn the_chart_package_lints_and_renders_the_released_image() {
    let package = out_dir().join(format!("{BINARY}-{VERSION}.tgz"));
    assert!(package.exists(), "{} is missing", package.display());
    let helm = tool("helm");
    let package = package.to_str().unwrap();
    run(&helm, &["lint", "--strict", package], &repo("."), &[]).ok("helm lint of the package");
    let rendered = run(&helm, &["template", "x", package], &repo("."), &[]).ok("helm template of the package");
    let images: Vec<&str> =
        rendered.lines().filter_map(|l| l.trim().strip_prefix("image: ")).map(|i| i.trim_matches('"')).collect();
    assert!(images.contains(&operator_image().as_str()), "{images:?}");
    // The CRD is a template (upgraded by `helm upgrade`, docs/install.md), so the package renders it.
    assert!(rendered.contains("name: neurondraconfigs.neurondra.io"), "the package carries the CRD");
}

#[test]
#[ignore = "needs make release-check"]
fn the_bundle_image_names_the_released_image_and_the_checksums_hold() {
    let out = out_dir();
    let entry_of = yaml("config/manager/kustomization.yaml");
    let name = entry_of["images"][0]["newName"].as_str().unwrap();
    let layout = Layout::unpack(&out.join(format!("{BINARY}-bundle-v{VERSION}.oci.tar")), "release-bundle");
    let manifest = entry(&layout, &format!("{name}-bundle:v{VERSION}"));
    let config = layout.json(manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(config["config"]["Labels"]["operators.operatorframework.io.bundle.package.v1"], BINARY);
    assert_eq!(config["config"]["Labels"]["org.opencontainers.image.licenses"], "Apache-2.0");
    let csv_path = format!("manifests/{BINARY}.clusterserviceversion.yaml");
    let csv = layout.file(&manifest, &csv_path, &layout.dir.join("rootfs"));
    let csv: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(csv).unwrap()).unwrap();
    assert_eq!(csv["spec"]["version"].as_str(), Some(VERSION));
    let deployment = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"];
    assert_eq!(deployment["containers"][0]["image"].as_str(), Some(operator_image().as_str()));

    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    let listed: Vec<&str> = sums.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    let mut files = vec![
        format!("{BINARY}-{VERSION}.oci.tar"),
        format!("{BINARY}-bundle-v{VERSION}.oci.tar"),
        format!("{BINARY}-{VERSION}.tgz"),
    ];
    // `make release` writes the SBOM too; `make release-check` does not.
    let sbom = format!("{BINARY}-{VERSION}.sbom.cdx.json");
    if out.join(&sbom).exists() {
        files.push(sbom);
    }
    assert_eq!(listed, files, "SHA256SUMS lists the release's files");
    sh("sha256sum", &["--check", "--quiet", "SHA256SUMS"], &out);
}

/// The crates `name version` the notices list (their first section).
fn noticed_crates(notices: &str) -> BTreeSet<String> {
    let (_, listed) = notices.split_once("CRATES (name version licence repository)\n\n").expect("a crate list");
    let listed = listed.split("\n\n").next().unwrap();
    listed.lines().map(|line| line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).collect()
}

/// The dependency list cargo-auditable embeds in a binary: its `.dep-v0` section (zlib-compressed JSON), cut out with
/// objcopy (as generic little-endian ELF, so the host's binutils read the other architecture's binary too) and
/// inflated with Python's zlib. Each package as `name version` with whether it is a build-time one.
fn embedded_crates(binary: &Path, dir: &Path) -> Vec<(String, bool)> {
    let section = dir.join("dep-v0.zlib");
    let dump = format!(".dep-v0={}", section.display());
    let (binary, scratch) = (binary.to_str().unwrap(), dir.join("scratch.o"));
    let args = ["-I", "elf64-little", "-O", "elf64-little", "--dump-section", &dump, binary, scratch.to_str().unwrap()];
    sh("objcopy", &args, dir);
    let inflate = "import sys, zlib; sys.stdout.write(zlib.decompress(open(sys.argv[1], 'rb').read()).decode())";
    let json: Value = serde_json::from_str(&sh("python3", &["-c", inflate, section.to_str().unwrap()], dir)).unwrap();
    let packages = json["packages"].as_array().expect("cargo-auditable's format: a packages list");
    packages
        .iter()
        .map(|p| {
            let name = format!("{} {}", p["name"].as_str().unwrap(), p["version"].as_str().unwrap());
            (name, p["kind"] == "build")
        })
        .collect()
}

/// Each image carries the project's LICENSE and THIRD-PARTY-NOTICES (hack/notices.py); each binary was built with
/// cargo-auditable, so scanners see its crates; and the two agree: every crate linked into the binary has its
/// notice, and every noticed crate is one the binary was built from.
#[test]
#[ignore = "needs make release-check"]
fn each_image_carries_the_notices_of_the_crates_its_binary_embeds() {
    let layout = Layout::unpack(&out_dir().join(format!("{BINARY}-{VERSION}.oci.tar")), "release-notices");
    let list = entry(&layout, &operator_image());
    let licence = std::fs::read_to_string(repo("LICENSE")).unwrap();
    for image in list["manifests"].as_array().unwrap() {
        let arch = image["platform"]["architecture"].as_str().unwrap();
        let manifest = layout.json(image["digest"].as_str().unwrap());
        let root = layout.dir.join(format!("notices-{arch}"));
        let shipped = layout.file(&manifest, "licenses/LICENSE", &root);
        assert_eq!(std::fs::read_to_string(shipped).unwrap(), licence, "{arch}: /licenses/LICENSE");
        let notices = std::fs::read_to_string(layout.file(&manifest, "licenses/THIRD-PARTY-NOTICES", &root)).unwrap();
        assert!(notices.starts_with(&format!("THIRD-PARTY NOTICES of {BINARY} {VERSION}")), "{arch}");
        assert!(notices.contains("Apache License") && notices.contains("Permission is hereby granted"), "{arch}");
        let noticed = noticed_crates(&notices);

        let embedded = embedded_crates(&layout.file(&manifest, BINARY, &root), &root);
        assert!(embedded.contains(&(format!("{BINARY} {VERSION}"), false)), "{arch}: the operator is the root");
        let linked: BTreeSet<String> = embedded
            .iter()
            .filter(|(name, build)| !build && !name.starts_with(BINARY))
            .map(|(n, _)| n.clone())
            .collect();
        assert!(linked.len() > 100, "{arch}: only {} crates embedded", linked.len());
        let unnoticed: Vec<&String> = linked.difference(&noticed).collect();
        assert!(unnoticed.is_empty(), "{arch}: crates in the binary without a notice: {unnoticed:?}");
        let all: BTreeSet<String> = embedded.into_iter().map(|(n, _)| n).collect();
        let stray: Vec<&String> = noticed.difference(&all).collect();
        assert!(stray.is_empty(), "{arch}: notices of crates the binary was not built from: {stray:?}");
    }
}

/// The EKS guide's `skopeo copy --all`, from the release check's archive to a local OCI layout instead of ECR:
/// skopeo reads the archive and copies the index with both architectures.
#[test]
#[ignore = "needs make release-check"]
fn skopeo_copies_both_architectures_as_the_eks_guide_says() {
    let out = out_dir();
    let dest = temp_dir("release-copy");
    let ecr = format!("docker://ACCOUNT.dkr.ecr.REGION.amazonaws.com/{BINARY}:{VERSION}");
    assert!(docs::EKS_COPY_IMAGE.ends_with(&ecr), "{}", docs::EKS_COPY_IMAGE);
    let command = docs::EKS_COPY_IMAGE
        .replace("oci-archive:dist/", &format!("oci-archive:{}/", out.display()))
        .replace(&ecr, &format!("oci:{}:{VERSION}", dest.display()));
    let copied = Command::new("bash").args(["-c", &command]).stdin(Stdio::null()).output().unwrap();
    assert!(copied.status.success(), "{command}: {}", String::from_utf8_lossy(&copied.stderr));
    let layout = Layout { dir: dest };
    let index = layout.index();
    let list = layout.json(index["manifests"][0]["digest"].as_str().unwrap());
    let mut arches: Vec<&str> =
        list["manifests"].as_array().unwrap().iter().filter_map(|m| m["platform"]["architecture"].as_str()).collect();
    arches.sort();
    assert_eq!(arches, ["amd64", "arm64"], "{list}");
}
