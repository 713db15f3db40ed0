"""Where alert receivers may point: the outbound filter (SSRF).

A receiver URL is set by an admin, but the server posts to it from inside the network, with the server's own
reach: its loopback services, the cloud's metadata endpoint (credentials at 169.254.169.254), link-local
neighbours. Those are refused by default, twice: when the receiver is created (its host name, a literal
address, and what the name resolves to now) and on every request, after resolving the name, by connecting
to the very address that was checked (so a name that later resolves to 127.0.0.1 is not posted to). Private
ranges (10/8, 172.16/12, 192.168/16, fc00::/7) stay allowed: Alertmanager and chat relays live there.
``receiver_allow`` (``SPECWATCH_RECEIVER_ALLOW``) lists the addresses, networks and host names an operator
permits anyway, e.g. a local Alertmanager on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# the cloud metadata services' names and addresses outside the link-local ranges (AWS's IPv6 one, Alibaba's)
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))
ALLOW_HINT = "allow it with SPECWATCH_RECEIVER_ALLOW (addresses, networks or host names)"


class OutboundRefused(httpx.ConnectError):
    """A receiver's host is one the filter refuses; an httpx error, so a delivery records it as its error."""


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # fe80::1%eth0: the zone is no part of it
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


def address_refusal(address: IPAddress) -> str | None:
    """Why the filter refuses this address by default, or None."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "the unspecified address (this host)"
    if address.is_link_local:
        return "link-local (cloud metadata lives there)"
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("0.0.0.0/8"):
        return "this host's network (0.0.0.0/8)"
    return None


def name_refusal(name: str) -> str | None:
    if name in METADATA_NAMES:
        return "a cloud metadata name"
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    return None


@dataclass(frozen=True)
class Outbound:
    """The filter with its allow-list; ``Outbound()`` is the default (nothing extra allowed)."""

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def allowing(cls, entries: Iterable[str]) -> Outbound:
        networks: list[IPNetwork] = []
        names: set[str] = set()
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.add(entry)
        return cls(tuple(networks), frozenset(names))

    @classmethod
    def of(cls, settings: Any) -> Outbound:
        """The filter a server's settings ask for (``receiver_allow``)."""
        return cls.allowing(settings.receiver_allow)

    def _allowed(self, address: IPAddress) -> bool:
        return any(address in net for net in self.networks)

    def refusal(self, host: str, addresses: Iterable[str] = ()) -> str | None:
        """Why posting to ``host`` (with what it resolved to) is refused, as a sentence; None when allowed."""
        name = host.strip("[]").lower().rstrip(".")
        if name in self.names:
            return None
        literal = _address(name)
        if literal is None:
            why = name_refusal(name)
            if why:
                return f"{host} is {why}; {ALLOW_HINT}"
        for text in [name] if literal is not None else addresses:
            address = _address(text)
            if address is None or self._allowed(address):
                continue
            why = address_refusal(address)
            if why:
                shown = host if literal is not None else f"{host} resolves to {address}, which"
                return f"{shown} is {why}; {ALLOW_HINT}"
        return None

    def check_url_host(self, host: str, port: int) -> str | None:
        """At creation: the name, a literal address, and what the name resolves to now (a name that does not
        resolve yet is let through: every request checks again)."""
        first = self.refusal(host)
        if first or _address(host.strip("[]")) is not None or host.lower().rstrip(".") in self.names:
            return first
        try:
            return self.refusal(host, resolve(host, port))
        except OSError:
            return None

    def client(self, timeout_s: float) -> httpx.Client:
        """The HTTP client every receiver request goes through. Environment proxies are not used: a proxy
        would resolve and connect where this filter cannot see."""
        return httpx.Client(
            timeout=timeout_s,
            follow_redirects=False,
            trust_env=False,
            transport=GuardedTransport(self),
        )


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host.strip("[]"), port, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


class GuardedTransport(httpx.HTTPTransport):
    """Resolves the receiver's name itself, refuses if any address is one the filter refuses, and connects to
    the address it checked (the Host header and TLS name stay the URL's): a DNS answer that changes between
    the check and the connection (rebinding) cannot move the request."""

    def __init__(self, outbound: Outbound, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outbound = outbound

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host, port = request.url.host, request.url.port or (443 if request.url.scheme == "https" else 80)
        if host.lower().rstrip(".") in self.outbound.names:
            return super().handle_request(request)
        try:
            addresses = resolve(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host}: {exc}", request=request) from exc
        why = self.outbound.refusal(host, addresses)
        if why:
            raise OutboundRefused(f"not sent: {why}", request=request)
        if _address(host) is None and addresses:
            request.url = request.url.copy_with(host=addresses[0])
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
        return super().handle_request(request)
