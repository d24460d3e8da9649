"""The testbed services' ports, in a module that imports nothing of secperf: the
mechanisms (the proxy redirects these ports) and the services both need them, and
the services import the mechanisms' port range."""

from __future__ import annotations

HTTP_PORT = 5380  # nginx
HTTPS_PORT = 5381  # nginx over TLS (http workloads with tls = true)
FTP_PORT = 5321  # vsftpd's control port
FTP_PASV_PORTS = (5330, 5379)  # vsftpd's passive data ports (50: 10 ran out at 48 clients)
