# Multi-stage build of the static ragent binary. Untested here: the
# development machines have no Docker engine.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ragent ./cmd/ragent

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ragent /ragent
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/ragent"]
CMD ["serve"]
