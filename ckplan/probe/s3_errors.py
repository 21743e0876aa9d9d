"""S3 failures as one line each, from their codes, never the raw message (it could echo request details)."""

from __future__ import annotations

from typing import Any, Protocol

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed

NO_CREDENTIALS = "no AWS credentials found (environment variables, ~/.aws/credentials or --profile)"
# the endpoint is busy or failing, not refusing the request: retrying later may succeed
BUSY_CODES = {
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
}


class Location(Protocol):
    """What a message may name of the target (the backend's S3Location): never a credential."""

    @property
    def bucket(self) -> str: ...
    @property
    def region(self) -> str | None: ...
    @property
    def safe_endpoint(self) -> str: ...
    @property
    def url(self) -> str: ...


def error_code(exc: Any) -> str:
    """A ClientError's code, as the endpoint sent it."""
    return str(exc.response.get("Error", {}).get("Code", "unknown"))


def describe(exc: Exception, loc: Location, what: str, measuring: bool = False) -> Exception:
    """An endpoint that cannot be reached is an environment problem (exit 3), unless `measuring` (then it went away
    under the probe); one that drops the connection, breaks a response, throttles or fails with a server error is a
    failed measurement (4) while `measuring`, an environment problem otherwise; a request it refuses is bad input
    (2). Anything neither botocore's nor a connection's comes back as it is: a bug in ckplan."""
    import botocore.exceptions as be

    failed = MeasurementFailed if measuring else EnvironmentProblem
    endpoint, name = loc.safe_endpoint, type(exc).__name__
    if isinstance(exc, be.NoCredentialsError):
        return InputError(NO_CREDENTIALS)
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
    if isinstance(exc, (be.CredentialRetrievalError, be.ConfigParseError, be.InvalidConfigError)):
        return EnvironmentProblem(f"cannot read the AWS credentials or config ({name}) during {what}")
    if isinstance(exc, be.EndpointConnectionError):
        if measuring:  # it answered when the probe began: gone since (a gateway killed or restarted)
            return MeasurementFailed(
                f"the S3 endpoint {endpoint} stopped taking connections during {what}; what the probe wrote there "
                f"may remain (`ckplan clean {loc.url}` removes it once the endpoint is back)"
            )
        return EnvironmentProblem(
            f"cannot connect to the S3 endpoint {endpoint} during {what}: connection refused or unreachable"
        )
    if isinstance(exc, (be.ConnectTimeoutError, be.ReadTimeoutError)):
        return EnvironmentProblem(f"the S3 endpoint {endpoint} did not answer in time during {what}")
    if isinstance(exc, (be.ConnectionClosedError, be.ConnectionError, ConnectionError)):
        return failed(f"the S3 endpoint {endpoint} dropped the connection during {what}")
    if isinstance(exc, (be.HTTPClientError, be.IncompleteReadError, be.ChecksumError, be.FlexibleChecksumError)):
        return failed(f"a response from the S3 endpoint {endpoint} broke off ({name}) during {what}")
    if isinstance(exc, be.ClientError):
        code = error_code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in BUSY_CODES or (isinstance(status, int) and (status >= 500 or status == 429)):
            http = f", HTTP {status}" if status else ""
            return failed(
                f"the S3 endpoint {endpoint} is busy or failing ({code}{http}) during {what}: try again later"
            )
        if code == "NoSuchBucket" and measuring:  # it was there when the probe began
            return MeasurementFailed(f"bucket {loc.bucket!r} was removed from {endpoint} during {what}")
        if code in ("NoSuchBucket", "404", "NotFound"):
            return InputError(f"bucket {loc.bucket!r} does not exist at {endpoint}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
            return InputError(f"the S3 endpoint rejected the credentials ({code}) during {what}")
        if code in ("403", "AccessDenied", "Forbidden"):
            return InputError(
                f"the S3 endpoint refused access ({code}) during {what}: wrong credentials, or no permission on {loc.bucket!r}"
            )
        return InputError(f"S3 error {code} during {what}")
    if isinstance(exc, be.BotoCoreError):
        return InputError(f"S3 client error ({name}) during {what}")
    return exc
