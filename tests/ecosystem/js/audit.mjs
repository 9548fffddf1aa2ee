// The GraphQL-over-HTTP audit suite of graphql-http against the API.
// Prints one JSON line: every audit's id, name, status (ok, warn, error) and reason.
import { auditServer } from 'graphql-http';

const [url, token] = process.argv.slice(2);
const withToken = (input, init = {}) =>
  fetch(input, { ...init, headers: { ...(init.headers || {}), authorization: `Bearer ${token}` } });
const results = await auditServer({ url, fetchFn: withToken });
console.log(
  JSON.stringify(
    results.map((r) => ({ id: r.id, name: r.name, status: r.status, reason: r.reason ?? null })),
  ),
);
