"""AWS list prices, stated once: every cost a benchmark prints derives from these.

DynamoDB on-demand, us-east-1, since the November 2024 price cut; DynamoDB
Streams and API Gateway WebSocket, us-east-1; S3 Standard, us-east-1 (attachments);
API Gateway's HTTP API, Lambda on arm64 and AppSync, us-east-1 (the all-in cost of
an operation, `scripts/benchmarks/cost.py`); API Gateway WebSocket, AppSync's
real-time and SQS, us-east-1 (realtime all in, `scripts/benchmarks/realtime_cost.py`)."""

PRICES_AS_OF = "DynamoDB on-demand, us-east-1, prices since November 2024"
WRITE_UNIT_USD = 0.625 / 1_000_000  # per write request unit
READ_UNIT_USD = 0.125 / 1_000_000  # per read request unit
# Streams are billed per GetRecords call (streams read request unit); a Lambda
# trigger's reads are free.
STREAM_READ_USD = 0.02 / 100_000

# S3 Standard in us-east-1, list prices: storage for the first 50 TB a month;
# requests by class (HeadObject is in the cheap one, like GET); data transfer out
# to the internet beyond the first 100 GB a month, which are free (an account past
# them pays this for every further GB; the figures below assume it is past them).
S3_PRICES_AS_OF = "S3 Standard, us-east-1, list prices"
S3_STORAGE_GB_MONTH_USD = 0.023  # per GB-month, the first 50 TB
S3_PUT_USD = 0.005 / 1000  # per PUT, COPY, POST or LIST request
S3_GET_USD = 0.0004 / 1000  # per GET, and per other request (HEAD included)
S3_TRANSFER_OUT_GB_USD = 0.09  # per GB out to the internet, after 100 GB/month free
S3_TRANSFER_OUT_FREE_GB = 100
# The front door and the compute, us-east-1 list prices as of 2026-11-26, first
# tiers: API Gateway's HTTP API for the first 300 million requests a month, a
# request metered per 512 KB (a larger one counts as several); Lambda per request
# and per GB-second on arm64, its duration billed per 1 ms; a Lambda function URL
# adds no charge of its own (Lambda's alone). AppSync per query or mutation, its
# resolvers' DynamoDB work billed apart at the same DynamoDB prices.
COMPUTE_PRICES_AS_OF = "HTTP API, Lambda arm64, AppSync: us-east-1, list prices of 2026-11-26"
HTTP_API_REQUEST_USD = 1.00 / 1_000_000
HTTP_API_METERED_BYTES = 512 * 1024
FUNCTION_URL_REQUEST_USD = 0.0
LAMBDA_REQUEST_USD = 0.20 / 1_000_000
LAMBDA_ARM64_GB_SECOND_USD = 0.0000133334
LAMBDA_BILLED_MS = 1  # duration is rounded up to this
APPSYNC_OPERATION_USD = 4.00 / 1_000_000

# Realtime, us-east-1 list prices of 2026-11-27, first tiers.
# API Gateway WebSocket APIs (https://aws.amazon.com/api-gateway/pricing/): messages
# sent and received, $1.00 a million for the first billion a month, each metered in
# 32 KB increments; connection minutes $0.25 a million. The quotas page
# (docs.aws.amazon.com/apigateway/latest/developerguide/
# apigateway-execution-service-websocket-limits-table.html) closes a connection
# idle for 10 minutes and any connection after 2 hours.
REALTIME_PRICES_AS_OF = (
    "API Gateway WebSocket, AppSync real-time, SQS standard: us-east-1, list prices of 2026-11-27"
)
WEBSOCKET_MESSAGE_USD = 1.00 / 1_000_000
WEBSOCKET_METERED_BYTES = 32 * 1024
WEBSOCKET_CONNECTION_MINUTE_USD = 0.25 / 1_000_000
WEBSOCKET_IDLE_TIMEOUT_MIN = 10
# AppSync GraphQL (https://aws.amazon.com/appsync/pricing/): $2.00 a million
# real-time updates ("outbound messages broadcast, along with WebSocket operations
# such as client connections, are considered real-time updates": a connect and a
# subscription's start are billed as one each), $0.08 a million connection minutes;
# a query or mutation is APPSYNC_OPERATION_USD.
APPSYNC_REALTIME_UPDATE_USD = 2.00 / 1_000_000
APPSYNC_CONNECTION_MINUTE_USD = 0.08 / 1_000_000
# SQS standard queue (https://aws.amazon.com/sqs/pricing/): $0.40 a million requests
# (each 64 KB of a payload a request), past the first million a month, which are free.
SQS_REQUEST_USD = 0.40 / 1_000_000
# SNS (https://aws.amazon.com/sns/pricing/), us-east-1: a Publish request $0.50 a
# million (each 64 KB of payload a request; the first million a month free), and
# each mobile push notification delivered $0.50 a million (the first million free).
# A silent push to one device is one of each. Checked 2026-11-28 against the stored
# text of https://www.factualminds.com/blog/amazon-sns-pricing-publishes-fanout-protocols/
# ("Standard topic publish is $0.50/M ... mobile push is $0.50/M").
SNS_PUBLISH_REQUEST_USD = 0.50 / 1_000_000
SNS_MOBILE_PUSH_USD = 0.50 / 1_000_000

# CloudWatch, us-east-1 list prices, first tiers: the operators' metrics
# (api/metrics.py) are EMF documents in the functions' logs, each a request's log
# line: Logs ingests them (standard class) and keeps them (serverless.yml's 30
# days); each metric extracted (a name and its dimension values) is a custom
# metric, billed by the month whether or not it gets data that hour (prorated by
# the hour); an alarm is billed per metric it reads (a metric-math alarm per metric
# of its expression); a dashboard by the month past the first three free.
# Checked 2026-11-27 (issue 50) against the stored text of the pricing page and of
# pages quoting its paid tiers (the page's own tables are not in its stored text):
# - free tier: https://aws.amazon.com/cloudwatch/pricing/ (10 custom metrics, 10
#   standard-resolution alarm metrics, 3 dashboards of up to 50 metrics each, 5 GB
#   of logs a month; the figures here leave the free tier out).
# - logs, $0.50 a GB ingested and $0.03 a GB-month stored (standard class):
#   https://c3x.dev/blog/cloudwatch-logs-cost-optimization ("us-east-1, June 2026"),
#   https://hykell.com/knowledge-base/aws-cloudwatch-logs-pricing. Since 2025-05-01 a
#   Lambda function's logs are billed in volume tiers, the first (10 TB a month) at
#   that same $0.50 (https://www.duckbillgroup.com/?p=9080: 60 TB a month, $30,000
#   flat, $12,500 tiered, i.e. 10 TB at $0.50, 20 at $0.25, 20 at $0.10, then $0.05):
#   an account logging more pays less a GB than this.
# - custom metrics, $0.30 a metric-month for the first 10,000 (then $0.10, $0.05,
#   $0.02): https://github.com/nishinoshake/aws-rough/issues/37, transcribing the
#   pricing page's table.
# - alarms, $0.10 a standard-resolution alarm metric a month ($0.30 high resolution):
#   https://c3x.dev/resources/aws/aws_cloudwatch_metric_alarm.
# - dashboards, $3.00 a dashboard-month: the aws-rough issue above, and
#   https://www.factualminds.com/blog/amazon-cloudwatch-pricing-metrics-logs-alarms-dashboards/.
CLOUDWATCH_PRICES_AS_OF = "CloudWatch, us-east-1, list prices of 2026-11-27"
CLOUDWATCH_LOGS_INGEST_GB_USD = 0.50
CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD = 0.03
CLOUDWATCH_CUSTOM_METRIC_MONTH_USD = 0.30
CLOUDWATCH_ALARM_METRIC_MONTH_USD = 0.10
CLOUDWATCH_DASHBOARD_MONTH_USD = 3.00

# A GB taken as 2**30 bytes, as AWS meters storage; with 10**9 bytes every
# per-byte figure here would be 7.4% higher.
GB = 2**30


def per_million_ops(read_units: float, write_units: float) -> float:
    """The cost in dollars of a million operations of these units each."""
    return round((read_units * READ_UNIT_USD + write_units * WRITE_UNIT_USD) * 1_000_000, 3)
