# ragent: a static binary built with Go from the Go module proxy's toolchain
# (Debian 12's go is too old for go.mod's go line), on an empty runtime
# image: the binary, CA certificates, /tmp and a non-root user. The target
# fakellm is the scale profile smoke test's model (internal/composetest/fakellm).
FROM debian:bookworm-slim AS toolchain
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
	&& apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		ca-certificates curl unzip git \
	&& rm -rf /var/lib/apt/lists/*
# The toolchain zip the go command itself downloads for GOTOOLCHAIN, pinned.
ARG GO_VERSION=1.26.8
ARG GO_SHA256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
RUN curl -fsSLo /tmp/go.zip "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip" \
	&& echo "${GO_SHA256}  /tmp/go.zip" | sha256sum -c - \
	&& unzip -q /tmp/go.zip -d /tmp/go && mv "/tmp/go/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" /usr/local/go \
	&& rm -rf /tmp/go /tmp/go.zip && chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
ENV PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .

FROM toolchain AS fakellm-build
RUN --mount=type=cache,target=/root/.cache/go-build \
	go build -trimpath -ldflags "-s -w" -o /out/fakellm ./internal/composetest/fakellm

FROM scratch AS fakellm
COPY --from=fakellm-build /out/fakellm /fakellm
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=5s --retries=30 CMD ["/fakellm", "get", "/health"]
ENTRYPOINT ["/fakellm"]
CMD ["serve"]

# nomsgpack: gin without its MessagePack binding (ragent speaks JSON only),
# 6 MB less binary (the image was 62 MB with it).
FROM toolchain AS build
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	go build -trimpath -tags nomsgpack -ldflags "-s -w -X main.version=${VERSION}" -o /out/ragent ./cmd/ragent \
	&& mkdir -p /out/tmp && chmod 1777 /out/tmp \
	&& echo 'ragent:x:10001:10001:ragent:/:/sbin/nologin' >/out/passwd \
	&& echo 'ragent:x:10001:' >/out/group

FROM scratch AS ragent
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/group /etc/group
COPY --from=build /out/tmp /tmp
COPY --from=build /out/ragent /ragent
USER 10001:10001
EXPOSE 8080
ENV RAGENT_HTTP_ADDR=:8080
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=6 CMD ["/ragent", "healthcheck"]
ENTRYPOINT ["/ragent"]
CMD ["serve"]

# ragent-ocr: the same binary on Debian with Tesseract (eng, chi_sim) and
# poppler's pdftoppm, installed by the same step as on a development
# machine (scripts/services.sh install ocr), for scanned PDFs and images
# (README "OCR"). Far bigger than the scratch image above (Tesseract's and
# poppler's libraries, ICU among them); compose builds it with
# RAGENT_IMAGE_TARGET=ragent-ocr (the default is the small image above).
FROM debian:bookworm-slim AS ragent-ocr
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
COPY scripts/services.sh /tmp/scripts/services.sh
COPY scripts/services /tmp/scripts/services
RUN bash /tmp/scripts/services.sh install ocr && rm -rf /var/lib/apt/lists/* /tmp/scripts \
	&& tesseract --list-langs | grep -qx chi_sim && command -v pdftoppm
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/group /etc/group
COPY --from=build /out/ragent /ragent
USER 10001:10001
EXPOSE 8080
ENV RAGENT_HTTP_ADDR=:8080
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=6 CMD ["/ragent", "healthcheck"]
ENTRYPOINT ["/ragent"]
CMD ["serve"]
