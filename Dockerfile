# sluice in a container: a static binary (CGO_ENABLED=0) on distroless's
# static image, run as its non-root user, with the config at
# /etc/sluice/sluice.yaml (examples/docker/sluice.yaml; mount your own
# over it). Build and run:
#
#   docker build -t sluice --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --rm -p 8080:8080 -p 9090:9090 --stop-timeout 35 \
#     -v $PWD/sluice.yaml:/etc/sluice/sluice.yaml:ro sluice
#
# docker kill -s HUP reloads the config. SIGTERM drains for timeouts.drain
# (30s by default): --stop-timeout gives it that long. A binary upgrade
# (USR2) does not fit a container, whose life is its first process's:
# roll out a new container instead.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What sluice version prints (the build context has no .git to read them
# from): scripts/release stamps the same three.
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
      -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY examples/docker/sluice.yaml /etc/sluice/sluice.yaml
USER nonroot:nonroot
EXPOSE 8080 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run", "-c", "/etc/sluice/sluice.yaml"]
