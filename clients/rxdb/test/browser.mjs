// The browser example (examples/browser) in headless Chromium (Debian's, driven by
// playwright-core over the DevTools protocol): two devices, each a browser context of
// its own (its own IndexedDB), replicating one tenant through the API.
//   A online: two people saved through the form, pushed.
//   The API cut off for A (DevTools: Network.emulateNetworkConditions offline, and the
//   API's URLs blocked with Network.setBlockedURLs); A edits, creates and deletes.
//   (Chromium applies neither to WebSockets: an open socket stays open and a new one
//   connects. It carries pokes only; every pull and push is HTTP, and blocked.)
//   A reloaded while the API is still blocked: the browser is online again for the
//   page's own files (served beside the API by the same server, which keeps running;
//   no service worker), the API's URL is not; A's data is still there, from IndexedDB.
//   Meanwhile B (online) edits another field of the same person and creates one.
//   The API back for A: A and B converge with the server.
// A screenshot of each step goes to <screenshot dir>/rxdb-browser-NN-<step>.png.
// Usage: node test/browser.mjs <page url> <graphql url> <token> <tenant> <screenshot dir>
// Prints one JSON line of findings for tests/ecosystem/test_rxdb_browser.py.
// Every wait is for evidence (a selector, the server's data, the page's status) and
// ends as soon as it is in; each gives up after PATIENCE_MS (default 120 s): a busy
// machine (a fresh clone's full run beside other work) is slow, never wrong.
import { chromium } from "playwright-core";

const [pageUrl, api, token, tenant, shots] = process.argv.slice(2);
const patience = Number(process.env.PATIENCE_MS || 120000);
const findings = { steps: [], screenshots: [] };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const wsApi = api.replace(/^http/, "ws");

async function serverPeople() {
  const people = {};
  let cursor = null;
  for (;;) {
    const response = await fetch(api, {
      method: "POST",
      headers: { "content-type": "application/json", Authorization: `Bearer ${token}` },
      body: JSON.stringify({
        query: `query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c, limit: 1000) {
          items { __typename id ... on Person { givenName familyName } } cursor } }`,
        variables: { t: tenant, c: cursor },
      }),
    });
    const { data, errors } = await response.json();
    if (errors) throw new Error(JSON.stringify(errors));
    for (const { __typename, id, ...fields } of data.changes.items) {
      if (__typename === "DeletedItem") delete people[id];
      else people[id] = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== null));
    }
    if (!data.changes.cursor) return people;
    cursor = data.changes.cursor;
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

async function openDevice(name) {
  const context = await browser.newContext({ viewport: { width: 900, height: 520 } });
  context.setDefaultTimeout(patience);
  context.setDefaultNavigationTimeout(patience);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  // SLOW_CPU=N: the page's CPU N times slower (DevTools), a busy machine on demand.
  if (process.env.SLOW_CPU) {
    await cdp.send("Emulation.setCPUThrottlingRate", { rate: Number(process.env.SLOW_CPU) });
  }
  const device = { name, page, cdp, apiRequests: [], blocked: [], sockets: [], console: [] };
  page.on("request", (r) => r.url().startsWith(api) && device.apiRequests.push(r.url()));
  page.on("requestfailed", (r) => {
    if (r.url().startsWith(api)) device.blocked.push(r.failure()?.errorText);
  });
  page.on("websocket", (ws) => {
    const socket = { url: ws.url(), framesReceived: 0, closed: false, error: null };
    device.sockets.push(socket);
    ws.on("framereceived", () => (socket.framesReceived += 1));
    ws.on("close", () => (socket.closed = true));
    ws.on("socketerror", (error) => (socket.error = String(error).slice(0, 200)));
  });
  page.on("console", (m) => m.type() === "error" && device.console.push(m.text().slice(0, 300)));
  page.on("pageerror", (e) => device.console.push(`pageerror: ${e.message}`.slice(0, 300)));
  const query = new URLSearchParams({ api, tenant, token, db: `device-${name}` });
  device.url = `${pageUrl}?${query}`;
  await page.goto(device.url);
  await page.waitForSelector("body[data-ready=true]");
  return device;
}

// A person saved the way a user does: the form, then Save.
async function saveThroughTheForm(device, fields) {
  const form = device.page.locator("#edit");
  for (const [name, value] of Object.entries(fields)) {
    await form.locator(`input[name=${name}]`).fill(value);
  }
  await form.locator("button[type=submit]").click();
}

const people = (device) => device.page.evaluate(() => window.app.people());
const shown = (device) =>
  device.page.$$eval("#people tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));

const started = Date.now();
// The step's screenshot, once the page's status says `status` (the page redraws it
// every 500 ms from what it last heard: on a busy machine a beat late).
async function screenshot(device, step, status) {
  findings.timings = { ...findings.timings, [step]: Date.now() - started };
  const said = await waitFor(`${device.name}'s status: ${status}`, async () => {
    const now = await device.page.textContent("#status");
    return now === status && now;
  }).catch(async () => device.page.textContent("#status")); // the test says what it was
  findings.status = { ...findings.status, [step]: said };
  const n = String(findings.screenshots.length + 1).padStart(2, "0");
  const path = `${shots}/rxdb-browser-${n}-${step}.png`;
  await device.page.screenshot({ path });
  findings.screenshots.push(path);
}

async function waitFor(what, check, timeoutMs = patience) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}
const canonical = (people) =>
  JSON.stringify(Object.keys(people).sort().map((id) => [id, Object.entries(people[id]).sort()]));
const same = (x, y) => canonical(x) === canonical(y);

async function cut(device) {
  await device.cdp.send("Network.emulateNetworkConditions", {
    offline: true, latency: 0, downloadThroughput: -1, uploadThroughput: -1,
  });
  await device.cdp.send("Network.setBlockedURLs", { urls: [`${api}*`, `${wsApi}*`] });
}

let a, b;
try {
  // 1. A online: two people through the form, pushed to the server.
  a = await openDevice("a");
  await saveThroughTheForm(a, { id: "ann", givenName: "Ann", familyName: "Smith" });
  await saveThroughTheForm(a, { id: "bob", givenName: "Bob" });
  await waitFor("A's people on the server", async () => Object.keys(await serverPeople()).length === 2);
  findings.steps.push({ step: "online", a: await people(a), server: await serverPeople() });
  await screenshot(a, "a-online", "online");

  // B opens and pulls them.
  b = await openDevice("b");
  await waitFor("B's first pull", async () => Object.keys(await people(b)).length === 2);
  await screenshot(b, "b-pulled", "online");

  // 2. The API cut off for A; A edits, creates and deletes.
  await cut(a);
  const onLine = await a.page.evaluate(() => navigator.onLine);
  await saveThroughTheForm(a, { id: "ann", familyName: "Lovelace" });
  await saveThroughTheForm(a, { id: "carl", givenName: "Carl" });
  await a.page.evaluate(() => window.app.remove("bob"));
  await waitFor("A's offline edits shown", async () => (await shown(a)).length === 2);
  await waitFor("A's push tried and blocked", async () => a.blocked.length > 0);
  findings.steps.push({
    step: "offline edits", navigatorOnLine: onLine, a: await people(a), server: await serverPeople(),
    blockedSoFar: a.blocked.length,
    // Chromium's offline emulation leaves an open WebSocket open (pokes only).
    sockets: a.sockets.map((s) => ({ ...s })),
  });
  await screenshot(a, "a-offline-edits", "offline");

  // 3. A reloaded with the API still cut off: the page's files come from the static
  // server, its data from IndexedDB.
  await a.cdp.send("Network.emulateNetworkConditions", {
    offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1,
  });
  const blockedBefore = a.blocked.length;
  const socketsBefore = a.sockets.length;
  await a.page.reload();
  await a.page.waitForSelector("body[data-ready=true]");
  await waitFor("A's data after the reload", async () => (await shown(a)).length === 2);
  await waitFor("the reloaded page's requests blocked", async () => a.blocked.length > blockedBefore);
  // Evidence, not timing: the page shows a failed sync once its error has come in
  // and its status has been redrawn (every 500 ms).
  await waitFor("A's status: API unreachable", async () => (await a.page.textContent("#status")) === "API unreachable");
  findings.steps.push({
    step: "reloaded offline", a: await people(a), shown: await shown(a), server: await serverPeople(),
    blockedAfterReload: a.blocked.slice(blockedBefore),
    socketsAfterReload: a.sockets.slice(socketsBefore).map((s) => ({ ...s })),
  });
  await screenshot(a, "a-reloaded-offline", "API unreachable");

  // Meanwhile B, online: another field of Ann, and a new person.
  await saveThroughTheForm(b, { id: "ann", givenName: "Ada" });
  await saveThroughTheForm(b, { id: "dora", givenName: "Dora" });
  await waitFor("B's edits on the server", async () => (await serverPeople()).dora);
  findings.steps.push({ step: "B while A is cut off", b: await people(b), a: await people(a) });
  await screenshot(b, "b-edits-while-a-offline", "online");

  // 4. The API back for A: both converge with the server.
  await a.cdp.send("Network.setBlockedURLs", { urls: [] });
  const back = Date.now();
  const converged = await waitFor("convergence", async () => {
    const [server, pa, pb] = [await serverPeople(), await people(a), await people(b)];
    return same(server, pa) && same(server, pb) && server.carl && !server.bob && server.ann?.givenName === "Ada"
      ? { server, a: pa, b: pb } : null;
  }).catch(async (error) => ({
    error: error.message, server: await serverPeople(), a: await people(a), b: await people(b),
  }));
  findings.steps.push({ step: "back online", ms: Date.now() - back, ...converged });
  await screenshot(a, "a-back-online", "online");
  await screenshot(b, "b-converged", "online");
  findings.errors = { a: await a.page.evaluate(() => window.app.errors()), b: await b.page.evaluate(() => window.app.errors()) };
} catch (error) {
  findings.failed = String(error?.stack ?? error);
} finally {
  findings.console = { a: a?.console ?? [], b: b?.console ?? [] };
  await browser.close();
}
console.log(JSON.stringify(findings));
