"""AWS list prices, stated once: every cost a benchmark prints derives from these.

DynamoDB on-demand, us-east-1, since the November 2024 price cut; DynamoDB
Streams and API Gateway WebSocket, us-east-1."""

PRICES_AS_OF = "DynamoDB on-demand, us-east-1, prices since November 2024"
WRITE_UNIT_USD = 0.625 / 1_000_000  # per write request unit
READ_UNIT_USD = 0.125 / 1_000_000  # per read request unit
# Streams are billed per GetRecords call (streams read request unit); a Lambda
# trigger's reads are free.
STREAM_READ_USD = 0.02 / 100_000


def per_million_ops(read_units: float, write_units: float) -> float:
    """The cost in dollars of a million operations of these units each."""
    return round((read_units * READ_UNIT_USD + write_units * WRITE_UNIT_USD) * 1_000_000, 3)
