"""S3 failures as one line each, from their codes, never the raw message (it could echo request details): an
endpoint that cannot be reached is an environment problem (exit 3); one that drops the connection, breaks a
response, throttles or fails with a server error is a failed measurement (4) while measuring, an environment
problem otherwise; a request it refuses is bad input (2). In the tables below, MeasurementFailed stands for that
"failed" class, and the first row that matches wins.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed

if TYPE_CHECKING:
    from ckplan.probe.backends.s3 import S3Location

Row = tuple[type[Exception], str]  # the failure class and its message, filled in by describe
NO_CREDENTIALS = "no AWS credentials found (environment variables, ~/.aws/credentials or --profile)"
# the endpoint is busy or failing, not refusing the request: retrying later may succeed
BUSY_CODES = (
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "RequestThrottled",
    "ServerBusy",
)
BUSY: Row = (
    MeasurementFailed,
    "the S3 endpoint {endpoint} is busy or failing ({code}{http}) during {what}: try again later",
)
CLIENT_ERRORS: dict[tuple[str, ...], Row] = {
    BUSY_CODES: BUSY,
    ("NoSuchBucket", "404", "NotFound"): (InputError, "bucket {bucket!r} does not exist at {endpoint}"),
    ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"): (
        InputError,
        "the S3 endpoint rejected the credentials ({code}) during {what}",
    ),
    ("403", "AccessDenied", "Forbidden"): (
        InputError,
        "the S3 endpoint refused access ({code}) during {what}: wrong credentials, or no permission on {bucket!r}",
    ),
}


@functools.cache
def botocore_errors() -> dict[tuple[type[Exception], ...], Row]:
    """Built on first use: botocore is an optional extra."""
    import botocore.exceptions as be

    return {
        (be.NoCredentialsError,): (InputError, NO_CREDENTIALS),
        (be.CredentialRetrievalError, be.ConfigParseError, be.InvalidConfigError): (
            EnvironmentProblem,
            "cannot read the AWS credentials or config ({name}) during {what}",
        ),
        (be.EndpointConnectionError,): (
            EnvironmentProblem,
            "cannot connect to the S3 endpoint {endpoint} during {what}: connection refused or unreachable",
        ),
        (be.ConnectTimeoutError, be.ReadTimeoutError): (
            EnvironmentProblem,
            "the S3 endpoint {endpoint} did not answer in time during {what}",
        ),
        (be.ConnectionClosedError, be.ConnectionError, ConnectionError): (
            MeasurementFailed,
            "the S3 endpoint {endpoint} dropped the connection during {what}",
        ),
        (be.HTTPClientError, be.IncompleteReadError, be.ChecksumError, be.FlexibleChecksumError): (
            MeasurementFailed,
            "a response from the S3 endpoint {endpoint} broke off ({name}) during {what}",
        ),
        (be.BotoCoreError,): (InputError, "S3 client error ({name}) during {what}"),
    }


def error_code(exc: Any) -> str:
    """A ClientError's code, as the endpoint sent it."""
    return str(exc.response.get("Error", {}).get("Code", "unknown"))


def describe(exc: Exception, loc: S3Location, what: str, measuring: bool = False) -> Exception:
    """`exc` as one of ckplan's errors; anything neither botocore's nor a connection's comes back as it is: a bug
    in ckplan."""
    import botocore.exceptions as be

    if isinstance(exc, be.InvalidRegionError):
        region = exc.kwargs.get("region_name", loc.region)
        if loc.region is not None:
            return InputError(f"‹region› {region!r} is not a valid AWS region name (such as us-east-1)")
        return EnvironmentProblem(
            f"the AWS region {region!r} set in the environment or the AWS config is not a valid region name"
        )
    if isinstance(exc, be.PartialCredentialsError):
        return EnvironmentProblem(
            f"incomplete AWS credentials in {exc.kwargs.get('provider', 'the environment')}: "
            f"{exc.kwargs.get('cred_var', 'a part')} is missing"
        )
    fields = {"endpoint": loc.safe_endpoint, "what": what, "name": type(exc).__name__, "bucket": loc.bucket}
    if isinstance(exc, be.ClientError):
        code = fields["code"] = error_code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        fields["http"] = f", HTTP {status}" if status else ""
        busy = isinstance(status, int) and (status >= 500 or status == 429)
        other = (InputError, "S3 error {code} during {what}")
        row: Row | None = BUSY if busy else next((r for codes, r in CLIENT_ERRORS.items() if code in codes), other)
    else:
        row = next((r for classes, r in botocore_errors().items() if isinstance(exc, classes)), None)
    if row is None:
        return exc
    kind, template = row
    if kind is MeasurementFailed and not measuring:
        kind = EnvironmentProblem
    return kind(template.format(**fields))
