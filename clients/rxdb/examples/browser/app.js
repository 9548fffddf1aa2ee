// The browser example of clients/rxdb (docs/clients.md, "RxDB in a browser"): people
// kept in IndexedDB (RxDB's Dexie storage), replicated through the API with
// replicateSyncAPI. Edits work offline and survive a reload; the replication pushes
// them when the API is reachable again. Bundled by esbuild (package.json "example").
//
// Settings come from the page's address:
//   index.html?api=http://127.0.0.1:8000/graphql&tenant=family1&token=<bearer token>&db=people
// (`db`: the IndexedDB database's name, one per device in the same browser profile).
import { createRxDatabase } from "rxdb";
import { getRxStorageDexie } from "rxdb/plugins/storage-dexie";
import { fieldLevelConflictHandler, replicateSyncAPI } from "../../index.js";

const params = new URLSearchParams(location.search);
const api = params.get("api") ?? "http://127.0.0.1:8000/graphql";
const tenantID = params.get("tenant") ?? "family1";
const token = params.get("token") ?? "";
const dbName = params.get("db") ?? "people";

const $ = (selector) => document.querySelector(selector);
const log = (line) => {
  $("#log").textContent = `${new Date().toISOString().slice(11, 23)} ${line}\n${$("#log").textContent}`.slice(0, 4000);
};

const db = await createRxDatabase({ name: dbName, storage: getRxStorageDexie() });
await db.addCollections({
  people: {
    schema: {
      version: 0,
      primaryKey: "id",
      type: "object",
      properties: {
        id: { type: "string", maxLength: 64 },
        givenName: { type: "string" },
        familyName: { type: "string" },
      },
      required: ["id"],
    },
    conflictHandler: fieldLevelConflictHandler,
  },
});

const replication = replicateSyncAPI({
  collection: db.people,
  url: api,
  tenantID,
  type: "PERSON",
  headers: async () => ({ Authorization: `Bearer ${token}` }),
  retryTime: 1000, // offline: try again every second
});
let errors = 0;
let lastError = 0;
replication.error$.subscribe((error) => {
  errors += 1;
  lastError = Date.now();
  // RxDB's codes (RC_PULL, RC_PUSH: the API unreachable) or the API's (BAD_USER_INPUT, ...).
  const cause = error?.parameters?.errors?.[0]?.message ?? "";
  log(`sync: ${error?.code ?? String(error).split("\n")[0]} ${cause}`.slice(0, 160));
});

// The table follows the collection: local writes at once, pulled ones as they come.
db.people.find({ sort: [{ id: "asc" }] }).$.subscribe((docs) => {
  $("#people").replaceChildren(
    ...docs.map((doc) => {
      const row = document.createElement("tr");
      for (const value of [doc.id, doc.givenName ?? "", doc.familyName ?? ""]) {
        row.appendChild(document.createElement("td")).textContent = value;
      }
      return row;
    }),
  );
});

// Offline: the browser says so. API unreachable: the replication failed within the
// last retries (it tries again every `retryTime`).
const showStatus = () => {
  const apiDown = Date.now() - lastError < 2500;
  const status = !navigator.onLine ? "offline" : apiDown ? "API unreachable" : "online";
  $("#status").textContent = status;
  $("#status").className = status === "online" ? "online" : "offline";
};
addEventListener("online", showStatus);
addEventListener("offline", showStatus);
setInterval(showStatus, 500);
showStatus();
$("#device").textContent = `device ${dbName}, tenant ${tenantID}`;

// Saving keeps the fields left empty as they are (an edit of one field).
async function save(fields) {
  const changes = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== ""));
  const existing = await db.people.findOne(changes.id).exec();
  return existing ? existing.incrementalPatch(changes) : db.people.insert(changes);
}
$("#edit").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  // Read and cleared before the first await: a save still writing when the next
  // person is typed in must not clear that person's fields (seen on a busy machine:
  // the second person saved with an empty form, never created).
  const fields = Object.fromEntries(new FormData(form));
  form.reset();
  await save(fields);
});

// For scripts driving the page (clients/rxdb/test/browser.mjs) and the console.
window.app = {
  save,
  remove: async (id) => (await db.people.findOne(id).exec())?.remove(),
  people: async () =>
    Object.fromEntries(
      (await db.people.find().exec()).map(({ id, givenName, familyName }) => [
        id,
        Object.fromEntries(Object.entries({ givenName, familyName }).filter(([, v]) => v != null)),
      ]),
    ),
  inSync: () => replication.awaitInSync(),
  errors: () => errors,
};
// Ready as soon as the local data is shown: offline, the first sync waits for the network.
document.body.dataset.ready = "true";
log("local data ready");
replication.awaitInitialReplication().then(() => log("first sync done"));
