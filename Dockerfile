# syntax=docker/dockerfile:1
# kwd image: kwd-controller, kwd-proxy and kwd-demo-backend in /usr/local/bin.
# No entrypoint: the Helm chart sets each container's command, and
#   docker run IMAGE kwd-controller serve --source=dir:/config --grpc-listen 0.0.0.0:18000 ...
#   docker run IMAGE kwd-proxy serve --controller HOST:18000 --admin-listen 0.0.0.0:9901 ...
# both work (admin and gRPC ports default to the container's loopback: give
# 0.0.0.0 to publish them). Build: docker build -t kwd:0.1.0 .

# ---- build: Debian 12 with the -dev packages, Release binaries ----------------
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The same package list as a developer machine (build part only), as its own
# layer so source edits do not reinstall packages.
COPY scripts/install-deps.sh scripts/
RUN KWD_BUILD_ONLY=1 ./scripts/install-deps.sh \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# `make build` flags with Release and no tests, benchmarks or fuzzers.
RUN cmake -S . -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DKWD_BUILD_TESTS=OFF -DKWD_BUILD_BENCH=OFF -DKWD_BUILD_FUZZ=OFF -DKWD_SANITIZE=OFF \
 && cmake --build /build --target kwd-controller kwd-proxy kwd-demo-backend \
 && strip /build/kwd-controller /build/kwd-proxy /build/kwd-demo-backend

# ---- runtime: bookworm-slim with only the shared libraries the binaries load --
FROM debian:bookworm-slim AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The runtime packages of the -dev packages above (`ldd` of the binaries mapped
# to packages; tests/deploy/dockerfile_test.py checks that they cover every
# library). ca-certificates: TLS to the API server and upstreams. kwd-proxy
# links libnghttp2 statically (dataplane/static_link.sh); libnghttp2-14 still
# comes in as a dependency of libcurl4, which kwd-controller's libcurl loads.
# kwd-proxy links liburing (its io_uring sends) statically the same way, so
# liburing2 is not needed here. libre2-9: kwd-controller compiles the
# modification rules' regular expressions to validate them (kwd-proxy links re2
# statically, see above).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      libcurl4 \
      libgrpc++1.51 \
      libprotobuf32 \
      libre2-9 \
      libssl3 \
      libyaml-cpp0.7 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 kwd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin kwd
COPY --from=build /build/kwd-controller /usr/local/bin/kwd-controller
COPY --from=build /build/kwd-proxy /usr/local/bin/kwd-proxy
COPY --from=build /build/kwd-demo-backend /usr/local/bin/kwd-demo-backend
USER 65532:65532
# proxy traffic and admin, controller gRPC and admin (the last three need
# --admin-listen/--grpc-listen 0.0.0.0:PORT: they default to loopback)
EXPOSE 8080 9901 18000 9902
CMD ["/usr/local/bin/kwd-proxy", "--help"]
