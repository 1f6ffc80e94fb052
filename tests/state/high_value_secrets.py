"""High-value secrets, one kind per provider format, for the redaction recall test and
bench/bench_redact.py.

Each kind follows the format its provider documents and public scanners' rules and test cases
describe (gitleaks' rule generators, trufflehog's detector tests, detect-secrets' plugin tests):
prefix, alphabet, length, and the context it is written in. Every value is generated here at
test time (seeded, so runs repeat): none is a real credential, and no literal in this file is a
whole token a push-protection scanner would flag.
"""

from __future__ import annotations

import base64
import json
import random
import string

RNG = random.Random(20261206)
UP = string.ascii_uppercase
LOW = string.ascii_lowercase
DIG = string.digits
ALNUM = UP + LOW + DIG
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"


def r(alphabet: str, n: int) -> str:
    """``n`` random characters of ``alphabet``, with a digit and a letter when it has both."""
    while True:
        out = "".join(RNG.choice(alphabet) for _ in range(n))
        has_both = set(alphabet) & set(DIG) and set(alphabet) & set(string.ascii_letters)
        if not has_both or (any(c.isdigit() for c in out) and any(c.isalpha() for c in out)):
            return out


def b64(n: int) -> str:
    return base64.b64encode(RNG.randbytes(n)).decode()


def pem_key(kind: str) -> str:
    body = b64(48 * 8)
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {kind}-----\n{lines}\n-----END {kind}-----\n"


def anywhere(token: str) -> list[str]:
    """A self-identifying token, in the places output shows one."""
    return [f"using {token} for the deploy", f'{{"key": "{token}"}}', f"TOKEN={token}", f"  - {token}"]


def high_value() -> dict[str, list[tuple[str, str]]]:
    """kind -> [(text, secret)]: ``secret`` must not survive redaction of ``text``."""
    RNG.seed(20261206)
    kinds: dict[str, list[tuple[str, str]]] = {}

    def add(kind: str, secret: str, texts: list[str]) -> None:
        kinds.setdefault(kind, []).extend((text, secret) for text in texts)

    def token(kind: str, value: str) -> None:
        add(kind, value, anywhere(value))

    # AWS
    token("aws-access-key-id", "AKIA" + r(UP + "234567", 16))
    s = r(ALNUM + "+/", 40)
    add(
        "aws-secret-key",
        s,
        [f"aws_secret_access_key = {s}", f"AWS_SECRET_ACCESS_KEY={s}", f'"SecretAccessKey": "{s}"'],
    )
    s = r(ALNUM + "+/", 356)
    add(
        "aws-session-token",
        s,
        [f"aws_session_token = {s}", f"AWS_SESSION_TOKEN={s}", f'"SessionToken": "{s}"'],
    )
    # Google Cloud
    key = pem_key("PRIVATE KEY")
    key_id = r(HEX, 40)
    account = {
        "type": "service_account",
        "project_id": "demo-project-42",
        "private_key_id": key_id,
        "private_key": key,
        "client_email": "deployer@demo-project-42.iam.gserviceaccount.com",
        "client_id": r(DIG, 21),
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    body_line = key.splitlines()[3]
    add("gcp-service-account", body_line, [json.dumps(account), json.dumps(account, indent=2)])
    add("gcp-service-account", key_id, [json.dumps(account, indent=2)])
    encoded = base64.b64encode(json.dumps(account, indent=2).encode()).decode()
    add(
        "gcp-service-account-b64",
        encoded[200:260],
        [f"GOOGLE_CREDENTIALS={encoded}", f"GCP_SA_KEY: {encoded}"],
    )
    token("gcp-api-key", "AIza" + r(URLSAFE, 35))
    token("gcp-oauth-client-secret", "GOCSPX-" + r(URLSAFE, 28))
    token("gcp-oauth-token", "ya29." + r(URLSAFE, 150))
    # Azure
    s = b64(64)
    add(
        "azure-storage-connection-string",
        s,
        [
            f"DefaultEndpointsProtocol=https;AccountName=acct{r(DIG, 4)};AccountKey={s};EndpointSuffix=core.windows.net",
            f'AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountName=x;AccountKey={s}"',
            f"az storage blob list --account-key {s}",
        ],
    )
    sig = (
        base64.b64encode(RNG.randbytes(32))
        .decode()
        .replace("+", "%2B")
        .replace("/", "%2F")
        .replace("=", "%3D")
    )
    add(
        "azure-sas-token",
        sig,
        [
            f"https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2026-12-31T00:00:00Z&sig={sig}",
            f"AZURE_SAS=?sv=2022-11-02&sp=r&sig={sig}",
        ],
    )
    s = r(ALNUM, 3) + "8Q~" + r(ALNUM + "_~.-", 34)
    add("azure-client-secret", s, [*anywhere(s), f'AZURE_CLIENT_SECRET="{s}"', f"client_secret: {s}"])
    s = b64(32)
    add(
        "azure-service-bus",
        s,
        [
            f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={s}",
            f'"ConnectionString": "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={s}"',
        ],
    )
    s = b64(64)
    add(
        "azure-cosmos-db",
        s,
        [
            f"AccountEndpoint=https://db1.documents.azure.com:443/;AccountKey={s};",
            f"COSMOS_KEY={s}",
        ],
    )
    s = r(URLSAFE, 54) + "=="
    add(
        "azure-function-key",
        s,
        [
            f"curl https://fn-app.azurewebsites.net/api/HttpTrigger1?code={s}",
            f"POST https://fn-app.azurewebsites.net/api/orders?clientId=web&code={s} 200",
        ],
    )
    token("azure-devops-pat", r(ALNUM, 52) + "JQQJ99" + r(ALNUM, 18) + "AZDO" + r(ALNUM, 4))
    # Version control and CI
    token("github-classic-pat", "ghp_" + r(ALNUM, 36))
    token("github-fine-grained-pat", "github_pat_" + r(ALNUM, 22) + "_" + r(ALNUM, 59))
    token("github-oauth", "gho_" + r(ALNUM, 36))
    token("github-app-token", "ghs_" + r(ALNUM, 36))
    token("gitlab-pat", "glpat-" + r(URLSAFE, 20))
    token("gitlab-runner-token", "glrt-" + r(URLSAFE, 20))
    # Chat
    token("slack-bot-token", f"xoxb-{r(DIG, 12)}-{r(DIG, 13)}-{r(ALNUM, 24)}")
    token("slack-user-token", f"xoxp-{r(DIG, 12)}-{r(DIG, 12)}-{r(DIG, 13)}-{r(HEX, 32)}")
    token(
        "slack-webhook",
        f"https://hooks.slack.com/services/T{r(UP + DIG, 10)}/B{r(UP + DIG, 10)}/{r(ALNUM, 24)}",
    )
    token("discord-webhook", f"https://discord.com/api/webhooks/{r(DIG, 18)}/{r(URLSAFE, 68)}")
    token("telegram-bot-token", f"{r(DIG, 10)}:AA{r(URLSAFE, 33)}")
    # Payments and messaging
    token("stripe-secret-key", "sk_live_" + r(ALNUM, 99))
    token("stripe-restricted-key", "rk_live_" + r(ALNUM, 99))
    token("twilio-api-key", "SK" + r(HEX, 32))
    s = r(HEX, 32)
    add("twilio-auth-token", s, [f"TWILIO_AUTH_TOKEN={s}", f"twilio_auth_token: {s}", f'"authToken": "{s}"'])
    token("sendgrid-api-key", f"SG.{r(URLSAFE, 22)}.{r(URLSAFE, 43)}")
    s = "key-" + r(HEX, 32)
    add("mailgun-api-key", s, [f"MAILGUN_API_KEY={s}", f"mailgun_key: {s}", f'"mailgunApiKey": "{s}"'])
    s = r(HEX, 32) + "-us" + r(DIG, 2)
    add("mailchimp-api-key", s, [f"MAILCHIMP_API_KEY={s}", f"mailchimp api key: {s}"])
    token("square-access-token", "EAAA" + r(URLSAFE, 60))
    token("shopify-access-token", "shpat_" + r(HEX, 32))
    # Package registries
    token("npm-token", "npm_" + r(ALNUM, 36))
    token("pypi-token", "pypi-AgEIcHlwaS5vcmc" + r(URLSAFE, 70))
    token("dockerhub-pat", "dckr_pat_" + r(URLSAFE, 27))
    token("rubygems-key", "rubygems_" + r(HEX, 48))
    # AI providers
    token("openai-key", "sk-proj-" + r(URLSAFE, 48) + "T3BlbkFJ" + r(URLSAFE, 48))
    token("anthropic-key", "sk-ant-api03-" + r(URLSAFE, 93) + "AA")
    token("huggingface-token", "hf_" + r(ALNUM, 34))
    # Infrastructure and observability
    token("digitalocean-token", "dop_v1_" + r(HEX, 64))
    token("vault-token", "hvs." + r(URLSAFE, 95))
    token("doppler-token", "dp.pt." + r(ALNUM, 43))
    token("new-relic-user-key", "NRAK-" + r(UP + DIG, 27))
    token("grafana-service-account-token", "glsa_" + r(ALNUM, 32) + "_" + r(HEX, 8))
    token("postman-api-key", f"PMAK-{r(HEX, 24)}-{r(HEX, 34)}")
    token("linear-api-key", "lin_api_" + r(ALNUM, 40))
    token("pulumi-token", "pul-" + r(HEX, 40))
    token("age-secret-key", "AGE-SECRET-KEY-1" + r("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58))
    s = r(HEX, 32)
    add("datadog-api-key", s, [f"DD_API_KEY={s}", f"datadog_api_key: {s}", f'"datadogApiKey": "{s}"'])
    s = f"{r(HEX, 8)}-{r(HEX, 4)}-{r(HEX, 4)}-{r(HEX, 4)}-{r(HEX, 12)}"
    add("heroku-api-key", s, [f"HEROKU_API_KEY={s}", f"heroku_api_key = '{s}'"])
    # Private keys
    for kind, label in (
        ("RSA PRIVATE KEY", "rsa-private-key"),
        ("OPENSSH PRIVATE KEY", "openssh-private-key"),
        ("EC PRIVATE KEY", "ec-private-key"),
        ("PRIVATE KEY", "pkcs8-private-key"),
    ):
        key = pem_key(kind)
        line = key.splitlines()[2]
        add(label, line, [f"$ cat key.pem\n{key}", json.dumps({"key": key}), f"KEY='{key}'"])
    # Tokens in HTTP
    head = base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT"}').decode().rstrip("=")
    claims = json.dumps({"sub": r(DIG, 9), "iss": "https://auth.example.com", "exp": 1893456000})
    jwt = f"{head}.{base64.urlsafe_b64encode(claims.encode()).decode().rstrip('=')}.{r(URLSAFE, 86)}"
    add("jwt", jwt, [*anywhere(jwt), f"Authorization: Bearer {jwt}"])
    s = r(URLSAFE, 40)
    add(
        "bearer-token",
        s,
        [f"Authorization: Bearer {s}", f'curl -H "Authorization: Bearer {s}" https://api.example.com'],
    )
    # Databases
    pw = r(ALNUM + "!%^*", 18)
    add(
        "database-url",
        pw,
        [
            f"DATABASE_URL=postgres://app:{pw}@db.internal:5432/app",
            f"mongodb+srv://admin:{pw}@cluster0.abcde.mongodb.net/test?retryWrites=true",
            f"mysql://root:{pw}@127.0.0.1:3306/db",
            f"redis://default:{pw}@cache.example.com:6379/0",
            f"amqp://guest:{pw}@rabbit:5672/vhost",
        ],
    )
    add(
        "connection-string-password",
        pw,
        [
            f"Server=tcp:db.example.com,1433;Database=app;User ID=sa;Password={pw};Encrypt=True;",
            f"jdbc:sqlserver://db:1433;databaseName=app;user=sa;password={pw}",
            f"host=db port=5432 dbname=app user=app password={pw}",
        ],
    )
    # Generic assignments
    gp = r(ALNUM + "!@#$%&", 16)
    add(
        "generic-password",
        gp,
        [
            f'password = "{gp}"',
            f"DB_PASSWORD={gp}",
            f"  password: {gp}",
            f'{{"password": "{gp}"}}',
            f"spring.datasource.password={gp}",
            f"mysql -u root -p{gp}",
        ],
    )
    gs = r(ALNUM, 32)
    add(
        "generic-secret",
        gs,
        [f"secret: {gs}", f"APP_SECRET_KEY={gs}", f"SECRET_KEY = '{gs}'", f'"clientSecret": "{gs}"'],
    )
    return kinds
