# kvmesh on Debian 12, from Debian packages only (the same list as scripts/bootstrap), built with
# CMake and Ninja; the image runs kvnode (docker-compose.yml starts a small cluster of them).
FROM debian:12 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
      libgtest-dev libgmock-dev libbenchmark-dev \
      libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev \
      libssl-dev libxxhash-dev librocksdb-dev libucx-dev \
      libboost-dev libboost-system-dev libprotobuf-dev protobuf-compiler libsystemd-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    && cmake --build /build --target kvnode kvctl kvmesh-synth

FROM debian:12
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libspdlog1.10 libfmt9 libyaml-cpp0.7 libssl3 libxxhash0 librocksdb7.8 libucx0 \
      libprotobuf32 libsystemd0 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/node/kvnode /build/cli/kvctl /build/node/kvmesh-synth /usr/local/bin/
RUN mkdir -p /var/lib/kvmesh /etc/kvmesh
EXPOSE 7420 9470
ENTRYPOINT ["/usr/local/bin/kvnode"]
