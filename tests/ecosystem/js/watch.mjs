// One changesAvailable subscription through the graphql-ws client, as an app holds
// it: prints a JSON line for each event ({"token": ...}), or for its error, until
// it is stopped. `since` is null, so the first event comes once it is registered.
// Usage: node watch.mjs <ws url> <authorization> <tenant>
import { createClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no WebSocket of its own

const [url, authorization, tenant] = process.argv.slice(2);
const SUBSCRIBE = `subscription($t: ID!) {
  changesAvailable(tenantID: $t, since: null) { changeToken } }`;

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: authorization },
  retryAttempts: 0,
});
client.subscribe(
  { query: SUBSCRIBE, variables: { t: tenant } },
  {
    next: (value) => console.log(JSON.stringify({ token: value.data.changesAvailable.changeToken })),
    error: (error) => {
      console.log(JSON.stringify({ error: String(error?.reason ?? error?.message ?? error) }));
      process.exit(1);
    },
    complete: () => process.exit(0),
  },
);
