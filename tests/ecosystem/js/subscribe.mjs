// changesAvailable through the graphql-ws client (what Apollo Client, urql and RxDB
// use), against two server processes on one table: subscribe on B, write on A.
// Usage: node subscribe.mjs <http url A> <ws url B> <token> <tenant> <stale since>
//                           <bad-signature token> <short-lived token>
// Prints one JSON line with what happened.
import { createClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no WebSocket of its own

const [httpA, wsB, token, tenant, staleSince, badToken, shortToken] = process.argv.slice(2);
const SUBSCRIBE = `subscription($t: ID!, $s: ID) {
  changesAvailable(tenantID: $t, since: $s) { tenantID changeToken } }`;
const CREATE = `mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }`;

function client(authorization, closed) {
  return createClient({
    url: wsB,
    webSocketImpl: WebSocket,
    connectionParams: authorization ? { Authorization: authorization } : {},
    retryAttempts: 0,
    lazy: true,
    on: { closed: (event) => closed && closed(event) },
  });
}

// The first event (or error) of one subscription, with a timeout.
function first(c, variables, timeoutMs = 10000) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ timeout: true }), timeoutMs);
    const stop = c.subscribe(
      { query: SUBSCRIBE, variables },
      {
        next: (value) => { clearTimeout(timer); stop(); resolve({ value }); },
        error: (error) => {
          clearTimeout(timer);
          resolve({ error: Array.isArray(error) ? error : { code: error.code, reason: error.reason } });
        },
        complete: () => {},
      },
    );
  });
}

async function mutateOnA() {
  const response = await fetch(httpA, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: CREATE, variables: { i: { tenantID: tenant, person: { givenName: "Ws" } } } }),
  });
  return (await response.json()).data.createPerson.person.changeToken;
}

const report = {};
const main = client(`Bearer ${token}`);

// Stale since: an event at once, carrying the tenant's newest token.
report.stale = await first(main, { t: tenant, s: staleSince });

// A write on server A wakes the subscriber on server B with its token.
if (!report.stale.value) {
  console.log(JSON.stringify(report));
  process.exit(1);
}
const headNow = report.stale.value.data.changesAvailable.changeToken;
const waiting = first(main, { t: tenant, s: headNow });
await new Promise((r) => setTimeout(r, 500)); // let the subscription register on B
const started = Date.now();
report.written = await mutateOnA();
report.crossServer = await waiting;
report.crossServerMs = Date.now() - started;

// A tenant not in the token: an error on that subscription only.
report.foreign = await first(main, { t: "not-" + tenant, s: null });
report.afterForeign = await first(main, { t: tenant, s: staleSince });
await main.dispose();

// Refused connections: no token, a token with a bad signature.
for (const [name, authorization] of [["noToken", null], ["badToken", `Bearer ${badToken}`]]) {
  const c = client(authorization);
  report[name] = await first(c, { t: tenant, s: null });
  await c.dispose();
}

// A token that expires while connected closes the socket.
let closedEvent = null;
const expiring = client(`Bearer ${shortToken}`, (event) => { closedEvent = event; });
// Up to date: no event comes, only the close when the token expires.
report.expiring = await first(expiring, { t: tenant, s: report.written }, 20000);
report.expiredClose = closedEvent && { code: closedEvent.code, reason: closedEvent.reason };
await expiring.dispose();

console.log(JSON.stringify(report));
