// changesAvailable through the graphql-ws client (what Apollo Client, urql and RxDB
// use), against two server processes on one table: subscribe on B, write on A.
// Usage: node subscribe.mjs <http url A> <ws url B> <token> <tenant> <stale since>
//                           <bad-signature token> <auth secret> [<first connect delay ms>]
// Prints one JSON line with what happened.
import { createHmac } from "node:crypto";
import { createClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no WebSocket of its own

const [httpA, wsB, token, tenant, staleSince, badToken, secret, delayArg] = process.argv.slice(2);
// A test hook: the first socket with a short-lived token connects this long after
// its token was made (a busy machine's delay, on purpose).
const firstConnectDelayMs = Number(delayArg || 0);
// The server's JWT_LEEWAY_SECONDS: it takes a token until this long past its exp.
const LEEWAY_S = 10;
const SUBSCRIBE = `subscription($t: ID!, $s: ID) {
  changesAvailable(tenantID: $t, since: $s) { tenantID changeToken } }`;
const CREATE = `mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }`;

function client(authorization, closed, connected) {
  return createClient({
    url: wsB,
    webSocketImpl: WebSocket,
    connectionParams: authorization ? { Authorization: authorization } : {},
    retryAttempts: 0,
    lazy: true,
    on: {
      closed: (event) => closed && closed(event),
      connected: () => connected && connected(),
    },
  });
}

// An HS256 token as the server's local auth takes (api.auth.make_local_token), which
// the server takes for `lifetimeS` seconds from now (its exp plus the leeway).
function shortLived(lifetimeS) {
  const now = Math.floor(Date.now() / 1000);
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const claims = { sub: "s", tenants: [tenant], iat: now - LEEWAY_S, exp: now - LEEWAY_S + lifetimeS };
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  const signature = createHmac("sha256", secret).update(unsigned).digest("base64url");
  return { token: `${unsigned}.${signature}`, expiresAt: (now + lifetimeS) * 1000 };
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

// A token that expires while connected closes the socket. It is made just before
// its socket connects, and is short-lived so that the close comes soon; a connect
// that comes after the token's end (a busy machine: the socket is refused,
// Forbidden, before it is acknowledged) shows nothing of the close, so it is made
// again, living twice as long, up to 32 s.
report.expiringAttempts = [];
for (let lifetimeS = 2; ; lifetimeS *= 2) {
  const short = shortLived(lifetimeS);
  if (report.expiringAttempts.length === 0 && firstConnectDelayMs) {
    await new Promise((r) => setTimeout(r, firstConnectDelayMs));
  }
  let closedEvent = null;
  let connectedAt = null;
  const expiring = client(
    `Bearer ${short.token}`,
    (event) => { closedEvent = event; },
    () => { connectedAt = Date.now(); },
  );
  // Up to date: no event comes, only the close when the token expires.
  const result = await first(expiring, { t: tenant, s: report.written }, lifetimeS * 1000 + 10000);
  await expiring.dispose();
  const close = closedEvent && { code: closedEvent.code, reason: closedEvent.reason };
  const late = connectedAt === null && Date.now() >= short.expiresAt;
  report.expiringAttempts.push({ lifetimeS, connected: connectedAt !== null, late, close });
  if (!late || lifetimeS >= 32) {
    report.expiring = result;
    report.expiredClose = close;
    report.expiredAfterConnectMs = connectedAt && Date.now() - connectedAt;
    break;
  }
}

console.log(JSON.stringify(report));
