"""Fixtures for the redactor: fake credentials in each provider's documented format, written in
the spellings command output uses, and a corpus of ordinary output that holds none.

Every token here is generated (seeded, so runs repeat) from the format its provider documents:
prefix, alphabet, length. None is a real credential, and none is copied from another project.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid

RNG = random.Random(20261203)
UP = string.ascii_uppercase
LOW = string.ascii_lowercase
DIG = string.digits
ALNUM = UP + LOW + DIG
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"
B32 = LOW + "234567"


def r(alphabet: str, n: int) -> str:
    """``n`` random characters of ``alphabet``; at least one digit and one letter when both are in it."""
    while True:
        out = "".join(RNG.choice(alphabet) for _ in range(n))
        if n < 8 or not (set(alphabet) & set(DIG)) or any(c.isdigit() for c in out):
            if n < 8 or not (set(alphabet) & set(string.ascii_letters)) or any(c.isalpha() for c in out):
                return out


def pem(kind: str = "RSA PRIVATE KEY", lines: int = 6) -> str:
    body = base64.b64encode(RNG.randbytes(48 * lines)).decode()
    wrapped = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {kind}-----\n{wrapped}\n-----END {kind}-----"


def spellings(name: str, secret: str) -> list[str]:
    """The common ways a named secret shows up in output."""
    lower = name.lower()
    return [
        f"{name}={secret}",
        f'export {name}="{secret}"',
        f"{lower}: {secret}",
        f'  "{lower}": "{secret}",',
        f"{lower} = '{secret}'",
        f":{lower} => '{secret}'",
        f"{name}: {secret}",
    ]


def bare(secret: str) -> list[str]:
    """A self-identifying token (prefix or structure): found anywhere."""
    return [
        f"token {secret} in use",
        f'{{"token":"{secret}"}}',
        f"value: '{secret}'",
        f"KEY={secret}",
        f"{secret}",
    ]


def _jwt() -> str:
    head = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()).decode().rstrip("=")
    claims = {"sub": str(RNG.randrange(10**9)), "name": "Ada", "iat": 1700000000 + RNG.randrange(10**6)}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{head}.{body}.{r(URLSAFE, 43)}"


def _pem_b64() -> str:
    return base64.b64encode(pem("PRIVATE KEY").encode()).decode()


def _wireguard() -> str:
    return base64.b64encode(RNG.randbytes(32)).decode()


def _azure_devops_pat_new() -> str:
    return r(ALNUM, 52) + "JQQJ99" + r(ALNUM, 18) + "AZDO" + r(ALNUM, 4)


def _bcrypt() -> str:
    return f"$2b$12${r(ALNUM + './', 53)}"


def _asrep() -> str:
    return f"$krb5asrep$23$svc_backup@CORP.EXAMPLE.COM:{r(HEX, 32)}${r(HEX, 200)}"


def families() -> dict[str, list[tuple[str, str]]]:
    """family -> [(text, secret)]: the secret must not survive redaction of the text."""
    f: dict[str, list[tuple[str, str]]] = {}

    def add(family: str, texts: list[str], secret: str) -> None:
        f.setdefault(family, []).extend((t, secret) for t in texts)

    # Cloud
    for prefix in ("AKIA", "ASIA", "A3TX", "ABIA", "ACCA"):
        add("cloud", bare(prefix + r(UP + "234567", 16)), "")
    aws_secret = r(ALNUM + "+/", 40)
    add("cloud", spellings("AWS_SECRET_ACCESS_KEY", aws_secret), aws_secret)
    add("cloud", [f"aws_secret_access_key => {aws_secret}", f'"SecretAccessKey": "{aws_secret}"'], aws_secret)
    add("cloud", bare(f"amzn.mws.{uuid.UUID(int=RNG.getrandbits(128))}"), "")
    add("cloud", bare("da2-" + r(LOW + DIG, 26)), "")
    add("cloud", bare("AIza" + r(URLSAFE, 35)), "")
    add("cloud", bare("ya29." + r(URLSAFE, 120)), "")
    add("cloud", bare("GOCSPX-" + r(URLSAFE, 28)), "")
    client_secret = r(URLSAFE, 24)
    add(
        "cloud",
        [f'{{"client_id":"1234.apps.googleusercontent.com","client_secret":"{client_secret}"}}'],
        client_secret,
    )
    account_key = base64.b64encode(RNG.randbytes(64)).decode()
    add(
        "cloud",
        [
            f"DefaultEndpointsProtocol=https;AccountName=acct1;AccountKey={account_key};EndpointSuffix=core.windows.net"
        ],
        account_key,
    )
    appconf = base64.b64encode(RNG.randbytes(32)).decode()
    add(
        "cloud",
        [f"Endpoint=https://myconf.azconfig.io;Id=ab12-l0-s0:{r(ALNUM, 20)};Secret={appconf}"],
        appconf,
    )
    add("cloud", bare(_azure_devops_pat_new()), "")
    ado_old = r(B32, 52)
    add("cloud", spellings("AZURE_DEVOPS_PAT", ado_old), ado_old)
    add("cloud", bare(r(ALNUM + "_~.", 3) + "8Q~" + r(ALNUM + "_~.-", 34)), "")
    add("cloud", bare("dop_v1_" + r(HEX, 64)), "")
    add("cloud", bare("hvs." + r(URLSAFE, 95)), "")

    # Version control
    for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
        add("vcs", bare(prefix + r(ALNUM, 36)), "")
    add("vcs", bare("github_pat_" + r(ALNUM, 22) + "_" + r(ALNUM, 59)), "")
    gh_secret = r(HEX, 40)
    add("vcs", spellings("GITHUB_SECRET", gh_secret), gh_secret)
    for prefix in ("glpat-", "glptt-", "gldt-", "glrt-"):
        add("vcs", bare(prefix + r(URLSAFE, 20)), "")
    add("vcs", bare("GR1348941" + r(URLSAFE, 20)), "")
    add("vcs", bare("ATBB" + r(ALNUM, 32)), "")

    # Chat
    for prefix in ("xoxb-", "xoxp-"):
        add("chat", bare(f"{prefix}{r(DIG, 12)}-{r(DIG, 13)}-{r(ALNUM, 24)}"), "")
    add("chat", bare(f"xapp-1-A{r(UP + DIG, 10)}-{r(DIG, 13)}-{r(HEX, 64)}"), "")
    add(
        "chat",
        bare(f"https://hooks.slack.com/services/T{r(UP + DIG, 10)}/B{r(UP + DIG, 10)}/{r(ALNUM, 24)}"),
        "",
    )
    add("chat", bare(f"https://discord.com/api/webhooks/{r(DIG, 18)}/{r(URLSAFE, 68)}"), "")
    bot_id = base64.b64encode(str(RNG.randrange(10**17, 10**19)).encode()).decode().rstrip("=")
    add("chat", bare(f"{bot_id}.{r(URLSAFE, 6)}.{r(URLSAFE, 38)}"), "")
    add("chat", bare(f"{r(DIG, 10)}:AA{r(URLSAFE, 33)}"), "")

    # Payments
    for prefix in ("sk_live_", "sk_test_", "rk_live_", "whsec_"):
        add("payments", bare(prefix + r(ALNUM, 32)), "")
    add("payments", bare("sq0atp-" + r(URLSAFE, 22)), "")
    add("payments", bare("sq0csp-" + r(URLSAFE, 43)), "")
    add("payments", bare(f"access_token$production${r(LOW + DIG, 16)}${r(HEX, 32)}"), "")
    add("payments", bare("rzp_live_" + r(ALNUM, 14)), "")

    # AI providers
    add("ai", bare("sk-proj-" + r(URLSAFE, 48) + "T3BlbkFJ" + r(URLSAFE, 48)), "")
    add("ai", bare("sk-" + r(ALNUM, 48)), "")
    add("ai", bare("sk-ant-api03-" + r(URLSAFE, 93) + "AA"), "")
    add("ai", bare("hf_" + r(ALNUM, 34)), "")
    add("ai", bare("gsk_" + r(ALNUM, 52)), "")
    add("ai", bare("r8_" + r(ALNUM, 37)), "")
    add("ai", bare("xai-" + r(ALNUM, 80)), "")
    add("ai", bare("pplx-" + r(ALNUM, 48)), "")

    # Package registries
    pypi = "pypi-AgEIcHlwaS5vcmc" + r(URLSAFE, 70)
    add("registries", bare(pypi), "")
    add("registries", bare("pypi-AgENdGVzdC5weXBpLm9yZw" + r(URLSAFE, 70)), "")
    add("registries", bare("npm_" + r(ALNUM, 36)), "")
    npmrc = r(ALNUM, 36)
    add("registries", [f"//registry.npmjs.org/:_authToken={npmrc}"], npmrc)
    add("registries", bare("dckr_pat_" + r(URLSAFE, 27)), "")
    docker_auth = base64.b64encode(f"ci-bot:{r(ALNUM, 20)}".encode()).decode()
    add(
        "registries",
        [f'{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{docker_auth}"}}}}}}'],
        docker_auth,
    )
    add("registries", bare("oy2" + r(LOW + DIG, 43)), "")
    add("registries", bare("rubygems_" + r(HEX, 48)), "")

    # Private keys
    for kind in (
        "RSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "EC PRIVATE KEY",
        "PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
    ):
        key = pem(kind)
        add(
            "private-keys",
            [f"key:\n{key}\ndone", json.dumps({"private_key": key + "\n"})],
            key.splitlines()[2],
        )
    key_b64 = _pem_b64()
    add("private-keys", [f"PRIVATE_KEY_B64={key_b64}", f'  tls.key: "{key_b64}"', key_b64], key_b64[20:60])
    wrapped = "\n".join(key_b64[i : i + 76] for i in range(0, len(key_b64), 76))
    add("private-keys", [wrapped], key_b64[20:60])
    wg = _wireguard()
    add("private-keys", [f"[Interface]\nPrivateKey = {wg}\nAddress = 10.0.0.2/32", f"PrivateKey={wg}"], wg)

    # JWTs
    jwt = _jwt()
    add("jwt", [*bare(jwt), f"Authorization: Bearer {jwt}"], jwt)
    jwt_secret = r(ALNUM + "!@#%", 32)
    add(
        "jwt",
        [f"jwt_secret: {jwt_secret}", f"JWT_SECRET={jwt_secret}", f'  jwtSecret: "{jwt_secret}"'],
        jwt_secret,
    )

    # Database, ODBC and other connection strings
    pw = r(ALNUM + "!#%^*", 16)
    add(
        "connection-strings",
        [
            f"postgres://app:{pw}@db.internal:5432/app",
            f"mongodb+srv://admin:{pw}@cluster0.abcde.mongodb.net/test",
            f"mysql://root:{pw}@127.0.0.1/db",
            f"redis://:{pw}@cache:6379/0",
            f"Driver={{ODBC Driver 18 for SQL Server}};Server=tcp:db.example.com,1433;Uid=sa;Pwd={pw};Encrypt=yes;",
            f"Server=myServerAddress;Database=myDataBase;User Id=myUsername;Password={pw};",
            f"Data Source=db01;Initial Catalog=Sales;User ID=report;Password={{{pw}}};",
            f"jdbc:mysql://db:3306/app?user=app&password={pw}",
            f"host=db.example.com port=5432 dbname=app user=app password={pw}",
        ],
        pw,
    )

    # Generic passwords and secrets
    gp = r(ALNUM + "!@#$%", 14)
    add(
        "generic",
        [
            f'password = "{gp}"',
            f"password: '{gp}'",
            f":password => '{gp}'",
            f"'password' => '{gp}',",
            f'"password": "{gp}"',
            f"DB_PASSWORD={gp}",
            f"REACT_APP_ADMIN_PASSWORD={gp}",
            f"export MYSQL_ROOT_PASSWORD='{gp}'",
            f"  password: {gp}",
            f"spring.datasource.password={gp}",
            f"admin_pass = {gp}",
            f"username=admin password={gp}",
            f'{{"username": "deploy", "password": "{gp}"}}',
            f"curl -u deploy:{gp} https://example.com",
            f"mysql -u root -p{gp} -h db",
            f"sshpass -p '{gp}' ssh admin@host",
            f"app --password {gp} --verbose",
            f"API_SECRET: {gp}",
            f'secret_key = "{gp}"',
        ],
        gp,
    )

    # Password hashes and Kerberos
    add("hashes", [*bare(_bcrypt()), f"admin:{_bcrypt()}"], "")
    add("hashes", bare(_asrep()), "")
    add("hashes", [f"root:$6${r(ALNUM, 16)}${r(ALNUM + './', 86)}:19000:0:99999:7:::"], "")

    # Fill in the secret of self-identifying cases: the token is the word after the prefix text.
    out: dict[str, list[tuple[str, str]]] = {}
    for family, cases in f.items():
        out[family] = [(t, s or _token_in(t)) for t, s in cases]
    return out


def _token_in(text: str) -> str:
    for piece in text.replace('"', " ").replace("'", " ").replace("[", " ").replace("]", " ").split():
        piece = piece.rstrip(",;:}").removeprefix("KEY=").removeprefix("admin:")
        if len(piece) >= 16 and piece not in {"token", "value:"} and not piece.startswith("{"):
            return piece.split(":", 1)[1] if piece.startswith("root:") else piece
    raise AssertionError(f"no token in {text!r}")


def ordinary_output() -> str:
    """Command output with no secret in it: builds, tests, git, checksums, lockfiles, minified JS."""
    rng = random.Random(7)
    lines: list[str] = []
    for i in range(400):
        sha = hashlib.sha1(f"c{i}".encode()).hexdigest()
        lines += [
            f"commit {sha}",
            f"Author: Dev {i} <dev{i}@example.com>",
            f"Date:   Thu Dec 3 11:{i % 60:02d}:00 2026 +0000",
            f"    Fix token refresh when the password reset link expires (#{1000 + i})",
            f"{sha[:7]} Merge pull request #{i} from org/feature/secret-rotation-{i}",
            f"{hashlib.sha256(str(i).encode()).hexdigest()}  dist/pkg-{i}.tar.gz",
            f"{hashlib.md5(str(i).encode()).hexdigest()}  build/obj/mod_{i}.o",
            f"id={uuid.UUID(int=rng.getrandbits(128))} status=ok request_id={uuid.uuid4().hex}",
            base64.b64encode(rng.randbytes(300)).decode(),
            base64.urlsafe_b64encode(rng.randbytes(120)).decode(),
            f"[{i:4d}/400] Compiling src/auth/token_{i}.c -> build/token_{i}.o",
            f"   Compiling secret-service v0.{i}.0 (/home/ci/work/crates/secret-service)",
            f"tests/test_password.py::test_password_hashing_{i} PASSED [{i % 100:3d}%]",
            "npm WARN deprecated request@2.88.2: request has been deprecated",
            f'    "resolved": "https://registry.npmjs.org/lodash/-/lodash-4.17.{i}.tgz",',
            f'    "integrity": "sha512-{base64.b64encode(rng.randbytes(64)).decode()}",',
            f'lodash@^4.17.21:\n  version "4.17.21"\n  integrity sha1-{base64.b64encode(rng.randbytes(20)).decode()}',
            f'name = "tokenizers"\nversion = "0.{i}.1"\nchecksum = "{hashlib.sha256(str(i).encode()).hexdigest()}"',
            "Enter your password: ",
            "Password:",
            "password reset email sent; check your inbox",
            "Your token has expired; run `gh auth login` to sign in again",
            "docker login --username ci-bot --password-stdin ghcr.io",
            "  --password-stdin    Take the password from stdin",
            "set password_min_length = 12, token_ttl = 3600",
            "secret_name: db-credentials   # the Kubernetes Secret that holds them",
            "api_version: 2024-01-01",
            "keyboard-layout: us  monkey: patched  turkey: roasted",
            f'  File "/usr/lib/python3.11/site-packages/keyring/backend_{i}.py", line {i}, in get_password',
            '!function(e,t){"object"==typeof exports&&"undefined"!=typeof module?module.exports=t():e.lib=t()}'
            "(this,function(){var e=function(e,t){return e.token=t.apiKey||null,e.password=void 0,e};return e});",
            f"ok  \tgithub.com/org/project/pkg/auth{i}\t0.{i:03d}s",
            f"+ git push https://github.com/org/repo.git refs/heads/release-{i}",
            f"docker pull ghcr.io/org/app@sha256:{hashlib.sha256(str(i * 7).encode()).hexdigest()}",
            f"gpg: Signature made Thu Dec 3; using RSA key {hashlib.sha1(str(i).encode()).hexdigest()[:16].upper()}",
            f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{base64.b64encode(rng.randbytes(32)).decode()[:43]} ci@host",
        ]
    return "\n".join(lines) + "\n"
