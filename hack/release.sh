#!/usr/bin/env bash
# The release (docs/release.md): everything a platform engineer installs, built on this machine without a Docker
# daemon and without pulling an image.
#
#   hack/release.sh build VERSION [OUT]    the release into OUT (default dist/): the operator image for linux/amd64 and
#                                          linux/arm64 as one OCI archive, the packaged Helm chart, the OLM bundle
#                                          image, the image's SBOM (CycloneDX) and SHA256SUMS
#   hack/release.sh check [OUT]            the same, fast (what `make test` checks): unoptimised binaries and no SBOM,
#                                          into OUT (default target/release-check-dist)
#   hack/release.sh binary ARCH [PROFILE]  build the static operator binary for ARCH (x86_64/amd64, aarch64/arm64)
#                                          with the cargo PROFILE (default release); print its path
#   hack/release.sh context ARCH PROFILE DIR  the operator image's build context in DIR: the Dockerfile, the binary,
#                                          LICENSE and THIRD-PARTY-NOTICES (hack/notices.py); hack/images.sh uses it
#   hack/release.sh publish REGISTRY VERSION [OUT]  push the release in OUT (default dist/; built first if missing) to
#                                          REGISTRY (host/path): the image index REGISTRY/neuron-dra-operator:VERSION,
#                                          the bundle image REGISTRY/neuron-dra-operator-bundle:vVERSION and the chart
#                                          oci://REGISTRY/charts; writes OUT/digests (REFERENCE@DIGEST per line, for
#                                          signing; `make publish`, .github/workflows/release.yml)
#   hack/release.sh set-version VERSION    write VERSION into every place that carries it (`make version`)
#   hack/release.sh ref operator|bundle|tag  print the operator image, the bundle image or the tag, as
#                                          config/manager/kustomization.yaml names them (the one place they are set)
#
# The version lives in Cargo.toml. `set-version` copies it into Cargo.lock, the chart (version and appVersion), the
# image tag in config/manager/kustomization.yaml and the OLM bundle (regenerated); tests fail when they disagree.
# `build` refuses a VERSION that is not the tree's. Binaries are static (musl) and built with cargo-zigbuild, zig
# being the C cross compiler and linker for both architectures, through cargo-auditable, which embeds the crates the
# binary is built from (a `.dep-v0` section, read by cargo audit, trivy, grype and syft; hack/tools.sh installs all
# three into the user cache).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/neuron-dra-operator/release"
ARCHES=(amd64 arm64)
SOURCE_URL="https://github.com/neurondra/neuron-dra-operator"
# The project's licence (LICENSE), as the images' OCI label names it; the operator image's comes from its Dockerfile.
LICENSE="Apache-2.0"

log() { echo "release: $*" >&2; }
die() { log "$*"; exit 1; }

cd "${REPO_ROOT}"

crate_version() { awk -F'"' '$1 == "version = " { print $2; exit }' Cargo.toml; }
kustomize_field() { awk -v key="$1:" '$1 == key { print $2; exit }' config/manager/kustomization.yaml; }
operator_ref() { echo "$(kustomize_field newName):$(kustomize_field newTag)"; }
bundle_ref() { echo "$(kustomize_field newName)-bundle:v$(kustomize_field newTag)"; }

# revision: the commit the tree is at, `-dirty` when it has changes; the binary's build_info and --version carry it,
# the image its label.
revision() {
  local commit
  commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  [[ -z "$(git status --porcelain 2>/dev/null)" ]] || commit="${commit}-dirty"
  echo "${commit}"
}

# rust_target ARCH: the musl target of an architecture, in either spelling.
rust_target() {
  case "$1" in
    x86_64 | amd64) echo x86_64-unknown-linux-musl ;;
    aarch64 | arm64) echo aarch64-unknown-linux-musl ;;
    *) die "unknown architecture '$1' (amd64, arm64)" ;;
  esac
}

# binary ARCH PROFILE: the static operator binary, built if needed; prints its path. Each architecture has a target
# directory of its own (target/static-ARCH): cargo locks its target directory for a whole build, and `make test`
# builds the arm64 binary in the background while the foreground builds the tests and the x86_64 binary.
binary() {
  local target profile="${2:-release}" tools zig zigbuild auditable target_dir
  target="$(rust_target "$1")"
  target_dir="${REPO_ROOT}/target/static-${target%%-*}"
  # One rustup at a time: `make test` may add both targets at once (the arm64 build runs in the background).
  mkdir -p "${CACHE_DIR}"
  (
    flock 9
    rustup target list --installed 2>/dev/null | grep -qx "${target}" || {
      log "adding the Rust target ${target}"
      rustup target add "${target}" >&2
    }
  ) 9>"${CACHE_DIR}/rustup.lock"
  zig="$(hack/tools.sh path zig)"
  zigbuild="$(hack/tools.sh path cargo-zigbuild)"
  auditable="$(hack/tools.sh path cargo-auditable)"
  tools="$(dirname "${zig}"):$(dirname "${zigbuild}"):$(dirname "${auditable}")"
  log "building neuron-dra-operator for ${target} (profile ${profile}, cargo auditable)"
  PATH="${tools}:${PATH}" CARGO_TARGET_DIR="${target_dir}" NEURON_DRA_OPERATOR_REVISION="$(revision)" \
    cargo auditable zigbuild --locked --quiet --profile "${profile}" --target "${target}" --bin neuron-dra-operator >&2
  echo "${target_dir}/${target}/${profile}/neuron-dra-operator"
}

buildah_() {
  command -v buildah >/dev/null || die "needs buildah: apt-get install -y buildah"
  buildah --root "${CACHE_DIR}/storage" --runroot "${CACHE_DIR}/run" --storage-driver vfs "$@"
}

# check_versions VERSION: the tree carries VERSION everywhere a release names it.
check_versions() {
  local version="$1" chart csv
  [[ "$(crate_version)" == "${version}" ]] ||
    die "VERSION=${version} but Cargo.toml says $(crate_version): run \`make version VERSION=${version}\` and commit first"
  chart="charts/neuron-dra-operator/Chart.yaml"
  [[ "$(awk '$1 == "version:" { print $2 }' "${chart}")" == "${version}" ]] || die "${chart}: version is not ${version}"
  [[ "$(awk '$1 == "appVersion:" { gsub(/"/, "", $2); print $2 }' "${chart}")" == "${version}" ]] ||
    die "${chart}: appVersion is not ${version}"
  [[ "$(kustomize_field newTag)" == "${version}" ]] ||
    die "config/manager/kustomization.yaml: newTag is not ${version}"
  csv="bundle/manifests/neuron-dra-operator.clusterserviceversion.yaml"
  grep -q "^  version: ${version}\$" "${csv}" || die "${csv}: spec.version is not ${version} (make bundle)"
}

# context ARCH PROFILE DIR: the operator image's build context for the Dockerfile's `prebuilt` stage: the binary,
# the project's LICENSE and the notices of the crates in the binary (/licenses in the image).
context() {
  local bin
  bin="$(binary "$1" "$2")"
  cp Dockerfile LICENSE "$3/"
  cp "${bin}" "$3/neuron-dra-operator"
  python3 hack/notices.py "$(rust_target "$1")" "$3/THIRD-PARTY-NOTICES"
}

# operator_image VERSION REVISION PROFILE OUT: both architectures' images, from the repository's Dockerfile through
# its `prebuilt` stage, in one OCI archive holding their index (what `skopeo copy --all` pushes).
operator_image() {
  local version="$1" revision="$2" profile="$3" out="$4" ref list arch ctx
  ref="$(operator_ref)"
  list="neuron-dra-operator-release:${version}"
  buildah_ manifest rm "${list}" >/dev/null 2>&1 || true
  buildah_ manifest create "${list}" >/dev/null
  for arch in "${ARCHES[@]}"; do
    ctx="$(mktemp -d)"
    context "${arch}" "${profile}" "${ctx}"
    log "building the ${arch} image"
    # --timestamp 0 and no history: the same binaries give the same digests.
    buildah_ bud --quiet --pull=never --layers=false --timestamp 0 --omit-history --platform "linux/${arch}" \
      --build-arg BINARY=prebuilt --build-arg VERSION="${version}" --build-arg REVISION="${revision}" \
      --label org.opencontainers.image.source="${SOURCE_URL}" \
      -t "${ref}-${arch}" -f "${ctx}/Dockerfile" "${ctx}" >/dev/null
    rm -rf "${ctx}"
    buildah_ manifest add "${list}" "containers-storage:${ref}-${arch}" >/dev/null
  done
  rm -f "${out}/neuron-dra-operator-${version}.oci.tar"
  buildah_ manifest push --quiet --all "${list}" "oci-archive:${out}/neuron-dra-operator-${version}.oci.tar:${ref}"
  buildah_ manifest rm "${list}" >/dev/null
}

bundle_image() {
  local version="$1" revision="$2" out="$3" ref
  ref="$(bundle_ref)"
  log "building the OLM bundle image"
  buildah_ bud --quiet --pull=never --layers=false --timestamp 0 --omit-history \
    --label org.opencontainers.image.version="${version}" --label org.opencontainers.image.revision="${revision}" \
    --label org.opencontainers.image.licenses="${LICENSE}" --label org.opencontainers.image.source="${SOURCE_URL}" \
    -t "${ref}" -f bundle/bundle.Dockerfile bundle >/dev/null
  rm -f "${out}/neuron-dra-operator-bundle-v${version}.oci.tar"
  buildah_ push --quiet "${ref}" "oci-archive:${out}/neuron-dra-operator-bundle-v${version}.oci.tar:${ref}"
}

chart_package() {
  local out="$1" helm
  helm="$(hack/tools.sh path helm)"
  "${helm}" lint --strict charts/neuron-dra-operator >&2
  "${helm}" package charts/neuron-dra-operator --destination "${out}" >/dev/null
}

# sbom VERSION OUT: the crates the operator binary is built from (its dependency graph for the musl target, with the
# default features: no dev-dependencies, no devtools), as CycloneDX 1.5 JSON. `--describe binaries` writes one file
# per binary next to Cargo.toml; only the operator's is kept.
sbom() {
  local version="$1" out="$2" cyclonedx
  cyclonedx="$(hack/tools.sh path cargo-cyclonedx)"
  log "writing the SBOM"
  PATH="$(dirname "${cyclonedx}"):${PATH}" cargo cyclonedx --quiet --format json --spec-version 1.5 \
    --target x86_64-unknown-linux-musl --describe binaries >&2
  mv -f neuron-dra-operator_bin.cdx.json "${out}/neuron-dra-operator-${version}.sbom.cdx.json"
  rm -f ./*_bin.cdx.json
}

# release VERSION PROFILE OUT SBOM(yes|no)
release() {
  local version="$1" profile="$2" out="$3" with_sbom="$4" revision
  check_versions "${version}"
  revision="$(revision)"
  mkdir -p "${out}"
  out="$(cd "${out}" && pwd)"
  local start=${SECONDS}
  operator_image "${version}" "${revision}" "${profile}" "${out}"
  bundle_image "${version}" "${revision}" "${out}"
  chart_package "${out}"
  rm -f "${out}"/*.sbom.cdx.json
  [[ "${with_sbom}" == no ]] || sbom "${version}" "${out}"
  (
    cd "${out}"
    files=(*.tar *.tgz)
    [[ "${with_sbom}" == no ]] || files+=(*.sbom.cdx.json)
    sha256sum -- "${files[@]}" >SHA256SUMS.tmp
    mv -f SHA256SUMS.tmp SHA256SUMS
  )
  log "release ${version} (${revision}) in ${out} after $((SECONDS - start))s:"
  ls -l "${out}" >&2
}

# publish REGISTRY VERSION OUT: pushes the release with skopeo and helm, as the registry's logged-in user (skopeo
# login, helm registry login); the digests it pushed go to OUT/digests.
publish() {
  local registry="${1%/}" version="$2" out="$3" helm digest chart_out
  command -v skopeo >/dev/null || die "needs skopeo: apt-get install -y skopeo"
  [[ -f "${out}/neuron-dra-operator-${version}.oci.tar" ]] || release "${version}" release "${out}" yes
  (cd "${out}" && sha256sum --check --quiet SHA256SUMS) || die "${out}/SHA256SUMS does not hold"
  helm="$(hack/tools.sh path helm)"
  : >"${out}/digests"
  log "pushing the operator image index to ${registry}/neuron-dra-operator:${version}"
  skopeo copy --quiet --all --digestfile "${out}/operator.digest" \
    "oci-archive:${out}/neuron-dra-operator-${version}.oci.tar" "docker://${registry}/neuron-dra-operator:${version}"
  echo "${registry}/neuron-dra-operator@$(cat "${out}/operator.digest")" >>"${out}/digests"
  log "pushing the bundle image to ${registry}/neuron-dra-operator-bundle:v${version}"
  skopeo copy --quiet --digestfile "${out}/bundle.digest" \
    "oci-archive:${out}/neuron-dra-operator-bundle-v${version}.oci.tar" \
    "docker://${registry}/neuron-dra-operator-bundle:v${version}"
  echo "${registry}/neuron-dra-operator-bundle@$(cat "${out}/bundle.digest")" >>"${out}/digests"
  log "pushing the chart to oci://${registry}/charts"
  chart_out="$("${helm}" push "${out}/neuron-dra-operator-${version}.tgz" "oci://${registry}/charts" 2>&1)" ||
    die "helm push: ${chart_out}"
  digest="$(awk '$1 == "Digest:" { print $2 }' <<<"${chart_out}")"
  [[ -n "${digest}" ]] || die "helm push printed no digest: ${chart_out}"
  echo "${registry}/charts/neuron-dra-operator@${digest}" >>"${out}/digests"
  rm -f "${out}/operator.digest" "${out}/bundle.digest"
  log "published ${version} to ${registry}:"
  cat "${out}/digests" >&2
  log "install it with: helm install neuron-dra-operator oci://${registry}/charts/neuron-dra-operator --version ${version}" \
    "-n neuron-dra-operator-system --create-namespace --set image.repository=${registry}/neuron-dra-operator"
}

set_version() {
  local version="$1" old
  [[ "${version}" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION=${version} is not semantic (x.y.z)"
  old="$(crate_version)"
  # The EKS guide's commands (and their copies the tests run) name the release: `VERSION=x.y.z`, the archive and
  # package file names and the image tag.
  sed -i -E "s/([-:=])${old//./\\.}([^0-9]|\$)/\1${version}\2/g" docs/install-eks.md tests/support/docs.rs
  sed -i "0,/^version = \".*\"/s//version = \"${version}\"/" Cargo.toml
  # The package's own entry in Cargo.lock: the line after its name.
  sed -i "/^name = \"neuron-dra-operator\"\$/{n;s/^version = \".*\"/version = \"${version}\"/}" Cargo.lock
  sed -i -e "s/^version: .*/version: ${version}/" -e "s/^appVersion: .*/appVersion: \"${version}\"/" \
    charts/neuron-dra-operator/Chart.yaml
  sed -i "s/^\(  newTag:\) .*/\1 ${version}/" config/manager/kustomization.yaml
  make --no-print-directory bundle chart
  log "version ${version} written; commit it, then \`make release VERSION=${version}\`"
}

case "${1:-}" in
  build) [[ $# -ge 2 ]] || die "usage: $0 build VERSION [OUT]"; release "$2" release "${3:-dist}" yes ;;
  check) release "$(crate_version)" release-check "${2:-target/release-check-dist}" no ;;
  binary) [[ $# -ge 2 ]] || die "usage: $0 binary ARCH [PROFILE]"; binary "$2" "${3:-release}" ;;
  context) [[ $# -eq 4 ]] || die "usage: $0 context ARCH PROFILE DIR"; context "$2" "$3" "$4" ;;
  publish) [[ $# -ge 3 ]] || die "usage: $0 publish REGISTRY VERSION [OUT]"; publish "$2" "$3" "${4:-dist}" ;;
  set-version) [[ $# -eq 2 ]] || die "usage: $0 set-version VERSION"; set_version "$2" ;;
  ref)
    case "${2:-}" in
      operator) operator_ref ;;
      bundle) bundle_ref ;;
      tag) kustomize_field newTag ;;
      *) die "usage: $0 ref operator|bundle|tag" ;;
    esac
    ;;
  *)
    echo "usage: $0 build VERSION [OUT] | check [OUT] | binary ARCH [PROFILE] | context ARCH PROFILE DIR" \
      "| publish REGISTRY VERSION [OUT] | set-version VERSION" >&2
    exit 2
    ;;
esac
