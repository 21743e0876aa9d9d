"""S3 failures as one line each, built from their codes: never the raw message, which could echo request details.

An endpoint that cannot be reached is an environment problem (exit 3); one that drops the connection, breaks a
response stream, throttles or fails with a server error while it is being measured is a failed measurement (exit
4), an environment problem otherwise; a request the endpoint refuses is bad input (exit 2). Anything that is
neither botocore's nor a connection's comes back as it is: a bug in ckplan, not the endpoint's doing.
"""

from __future__ import annotations

from typing import Protocol

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed


class Endpoint(Protocol):
    """Where the request went, as the messages name it (the S3 backend's S3Location)."""

    @property
    def bucket(self) -> str: ...
    @property
    def region(self) -> str | None: ...
    @property
    def safe_endpoint(self) -> str: ...


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


def describe(exc: Exception, loc: Endpoint, what: str, measuring: bool = False) -> Exception:
    """One line from an S3 failure (the module's rules); `measuring`: while the endpoint was being measured."""
    import botocore.exceptions as be

    failed = MeasurementFailed if measuring else EnvironmentProblem

    if isinstance(exc, be.NoCredentialsError):
        return InputError("no AWS credentials found (environment variables, ~/.aws/credentials or --profile)")
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
        return EnvironmentProblem(f"cannot read the AWS credentials or config ({type(exc).__name__}) during {what}")
    if isinstance(exc, be.EndpointConnectionError):
        return EnvironmentProblem(
            f"cannot connect to the S3 endpoint {loc.safe_endpoint} during {what}: connection refused or unreachable"
        )
    if isinstance(exc, (be.ConnectTimeoutError, be.ReadTimeoutError)):
        return EnvironmentProblem(f"the S3 endpoint {loc.safe_endpoint} did not answer in time during {what}")
    if isinstance(exc, (be.ConnectionClosedError, be.ConnectionError, ConnectionError)):
        return failed(f"the S3 endpoint {loc.safe_endpoint} dropped the connection during {what}")
    if isinstance(exc, (be.HTTPClientError, be.IncompleteReadError, be.ChecksumError, be.FlexibleChecksumError)):
        return failed(
            f"a response from the S3 endpoint {loc.safe_endpoint} broke off ({type(exc).__name__}) during {what}"
        )
    if isinstance(exc, be.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "unknown"))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in BUSY_CODES or (isinstance(status, int) and (status >= 500 or status == 429)):
            return failed(
                f"the S3 endpoint {loc.safe_endpoint} is busy or failing ({code}"
                + (f", HTTP {status}" if status else "")
                + f") during {what}: try again later"
            )
        if code in ("NoSuchBucket", "404", "NotFound"):
            return InputError(f"bucket {loc.bucket!r} does not exist at {loc.safe_endpoint}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
            return InputError(f"the S3 endpoint rejected the credentials ({code}) during {what}")
        if code in ("403", "AccessDenied", "Forbidden"):
            return InputError(
                f"the S3 endpoint refused access ({code}) during {what}: wrong credentials, or no permission on {loc.bucket!r}"
            )
        return InputError(f"S3 error {code} during {what}")
    if isinstance(exc, be.BotoCoreError):
        return InputError(f"S3 client error ({type(exc).__name__}) during {what}")
    return exc
