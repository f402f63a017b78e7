"""The server's certificate (``datum.fleet.tls``): made once, issued again when due, refused when not its own;
the ``[server]`` TLS settings; plain HTTP off loopback refused. Real files and keys, an injected clock."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from datum.config import Settings
from datum.core.findings import Problem
from datum.fleet.tls import RENEW_WITHIN, described, plain_http_refused, prepared


def _settings(home: Path, **server: object) -> Settings:
    return Settings.model_validate({"home": str(home), "server": {"tls": "auto", **server}})


NOW = datetime(2026, 12, 6, tzinfo=UTC)


def test_auto_makes_its_ca_once_and_issues_again_when_due_or_the_names_change(tmp_path: Path):
    settings = _settings(tmp_path, tls_names=["datum.example.com", "10.0.0.5"])
    first = prepared(settings, NOW)
    assert first is not None and first.made == ("ca", "certificate")
    assert first.names == ("datum.example.com", "10.0.0.5") and first.pin == first.chain[-1].pin
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "tls").iterdir()} == {
        "ca.pem": 0o600, "ca.key": 0o600, "server.pem": 0o600, "server.key": 0o600,
    }
    assert prepared(settings, NOW + timedelta(days=300)) == first  # nothing made: long to go
    due = first.not_after - RENEW_WITHIN + timedelta(hours=1)
    renewed = prepared(settings, due)
    assert renewed is not None and renewed.made == ("certificate",)
    assert renewed.pin == first.pin and renewed.chain[0].pin != first.chain[0].pin  # the same CA, a new key
    assert renewed.not_after > first.not_after
    renamed = prepared(_settings(tmp_path, tls_names=["datum.example.com"]), due)
    assert renamed is not None and renamed.made == ("certificate",) and renamed.names == ("datum.example.com",)
    assert renamed.pin == first.pin
    shown = described(_settings(tmp_path, tls_names=["datum.example.com"]))
    assert shown == renamed and shown.made == ()  # datum tls show: what is there, nothing made


def test_keys_others_may_read_a_ca_that_is_not_its_keys_and_a_link_are_refused(tmp_path: Path):
    settings = _settings(tmp_path)
    prepared(settings, NOW)
    os.chmod(tmp_path / "tls" / "ca.key", 0o644)
    with pytest.raises(Problem, match="ca.key is readable by others than its owner: chmod 600 it"):
        prepared(settings, NOW)
    os.chmod(tmp_path / "tls" / "ca.key", 0o600)
    other = tmp_path / "other"
    prepared(_settings(other), NOW)
    (tmp_path / "tls" / "ca.pem").write_bytes((other / "tls" / "ca.pem").read_bytes())
    with pytest.raises(Problem, match="ca.pem is not the certificate of .*ca.key"):
        prepared(settings, NOW)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "tls").symlink_to(other / "tls")
    with pytest.raises(Problem, match="is not a directory \\(a link or a file is there\\): refused"):
        prepared(_settings(linked), NOW)


def test_show_before_the_first_start_or_with_tls_off(tmp_path: Path):
    with pytest.raises(Problem) as before:
        described(_settings(tmp_path))
    assert before.value.findings[0].code == "UNAVAILABLE" and "on its first start" in before.value.findings[0].message
    assert described(Settings.model_validate({"home": str(tmp_path)})) is None


@pytest.mark.parametrize(
    ("server", "why"),
    [
        ({"tls_cert": "/c.pem"}, "tls_cert and tls_key go together"),
        ({"tls": "auto", "tls_cert": "/c.pem", "tls_key": "/k.pem"}, 'tls = "auto" makes its own certificate'),
        ({"tls": "auto", "tls_names": ["bad name!"]}, "is neither a DNS name nor an IP address"),
        ({"tls_names": ["a.example"]}, 'the names of the certificate tls = "auto" makes'),
        ({"tls": "on"}, "auto"),
    ],
)
def test_tls_settings_that_do_not_hold_together_are_refused(server: dict[str, object], why: str):
    with pytest.raises(Exception, match=why):
        Settings.model_validate({"server": server})


def test_plain_http_is_refused_off_loopback_only():
    for host in ("0.0.0.0", "::", "10.0.0.5", "datum.example.com", "192.0.2.1"):
        refused = plain_http_refused(host, https=False, insecure=False)
        assert refused is not None and refused.findings[0].code == "INVALID_INPUT", host
        assert f"refused to serve plain HTTP on {host}" in refused.findings[0].message
        assert refused.findings[0].fields[0].field == "server.insecure_http"
        assert plain_http_refused(host, https=True, insecure=False) is None
        assert plain_http_refused(host, https=False, insecure=True) is None
    for host in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"):
        assert plain_http_refused(host, https=False, insecure=False) is None, host


def test_a_second_replica_given_the_first_ones_ca_issues_its_own_certificate_under_the_same_pin(tmp_path: Path):
    first = prepared(_settings(tmp_path / "one", tls_names=["one.example"]), NOW)
    (tmp_path / "two" / "tls").mkdir(parents=True, mode=0o700)
    for name in ("ca.pem", "ca.key"):
        copy = tmp_path / "two" / "tls" / name
        copy.write_bytes((tmp_path / "one" / "tls" / name).read_bytes())
        copy.chmod(0o600)
    second = prepared(_settings(tmp_path / "two", tls_names=["two.example"]), NOW)
    assert first is not None and second is not None
    assert second.made == ("certificate",) and second.pin == first.pin and second.names == ("two.example",)


def test_tls_show_prints_the_ca_file_pin_names_and_expiry(tmp_path: Path, datum_cli):
    config = tmp_path / "datum.toml"
    config.write_text(f'home = "{tmp_path}"\n[server]\ntls = "auto"\ntls_names = ["datum.example.com"]\n')
    code, _out, err = datum_cli("tls", "show", "--config", str(config))
    assert code == 69 and "datum serve makes its CA and certificate there on its first start" in err
    served = prepared(Settings.model_validate({"home": str(tmp_path), "server": {"tls": "auto", "tls_names": ["datum.example.com"]}}))
    assert served is not None
    code, out, _err = datum_cli("tls", "show", "--config", str(config))
    assert code == 0
    lines = dict(line.split(":", 1) for line in out.splitlines() if line and not line.startswith("agents"))
    assert lines["CA file"].strip() == str(tmp_path / "tls" / "ca.pem") and lines["pin"].strip() == served.pin
    assert lines["names"].strip() == "datum.example.com" and lines["expires"].strip().endswith("(in 364d 23h)")
    assert f"--pin {served.pin}" in out.splitlines()[-1]
    (tmp_path / "off.toml").write_text(f'home = "{tmp_path}"\n')
    code, _out, err = datum_cli("tls", "show", "--config", str(tmp_path / "off.toml"))
    assert code == 65 and "TLS is off in this configuration" in err
