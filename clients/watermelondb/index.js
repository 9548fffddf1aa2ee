// Sync a WatermelonDB database through the offline-first GraphQL sync API.
//
//   import { syncWithAPI } from "@offline-sync-api/watermelondb";
//   await syncWithAPI({
//     database, url: "https://api.example.com/graphql", tenantID: "family1",
//     getToken: async ({ refresh }) => (refresh ? await refreshToken() : await token()),
//     tables: { people: { type: "PERSON", columns: { givenName: "given_name", familyName: "family_name" } } },
//   });
//
// WatermelonDB's synchronize() owns the local side (what changed, marking records
// synced, the per-column merge); this module answers its pullChanges and pushChanges:
//
// Pull: `changes(tenantID, since, cursor, types)`, page by page. The API returns each
// entity's latest version and cannot tell a create from an update, so every live
// entity is sent as `updated` and synchronize() runs with `sendCreatedAsUpdated: true`;
// a DeletedItem is a `deleted` id. WatermelonDB's `lastPulledAt` is a number and the
// API's position is not: the position ({since, cursor}) is kept in the database's
// local storage (key `sync_api_position`) under the number the pull answers as its
// timestamp, which WatermelonDB saves in the same write as the pulled records. So an
// interrupted sync resumes from the last page it applied (a pull reads at most
// `pagesPerPull` pages; syncWithAPI calls synchronize() again until the last page).
// A read's pages end at the bound its first page set: a read resumed from an earlier
// sync() call is followed by one more from its end, so that the call ends holding
// every write committed before it began.
//
// Push: a created record is `create<Type>` (its WatermelonDB id), an updated one
// `update<Type>` of the columns WatermelonDB lists as changed (`_changed`), guarded by
// the record's change token, kept in the column `change_token` (`tokenColumn`);
// a deleted one `delete<Type>`, guarded by the same token. Each mutation has a
// clientMutationID derived from what it sends and the token it is based on, so a
// push whose response was lost is replayed by the server, never applied twice.
//   - CONFLICT on an update (or ALREADY_EXISTS on a create): the push throws, so the
//     synchronize() call fails as WatermelonDB's protocol requires; the next one pulls
//     (the conflict's current version is added to that pull), WatermelonDB merges per
//     column (its local changes win over the server's on the columns it changed) and
//     pushes again with the new token. syncWithAPI does that round itself.
//   - CONFLICT on a deletion: a deletion wins over a concurrent edit (as WatermelonDB's
//     own pull keeps a local deletion over a remote update), so it is sent again at
//     once with the current token. An update of an entity deleted meanwhile comes
//     back as a CONFLICT carrying the DeletedItem: the next pull deletes the record.
//     A pull that deletes a record (a DeletedItem, its own or one a push met)
//     reports each unsynced change of it first: `onRejected({table, id, kind,
//     code: "CONFLICT", current})`, `current` the DeletedItem (the server's answer
//     to a write of a deleted record), since WatermelonDB destroys the record with
//     its unsynced changes; a local deletion of it is not refused.
//   - REJECTED (bad data, FORBIDDEN for a reader, ATTACHMENT_MISSING): reported to
//     `onRejected({table, id, code, message})` once and reverted: the next pull puts
//     the server's state back (a create the server refused goes away). A refused
//     deletion is reverted by the push itself: WatermelonDB's pull skips an update of
//     a record it holds as deleted, so the push puts the server's version in place of
//     the deleted row. Not retried. UNAVAILABLE (retryable) fails the synchronize()
//     call instead: try again later.
// After a push that wrote something, syncWithAPI pulls once more so the records hold
// their new change tokens (a later edit then needs no conflict round).
//
// RESYNC_REQUIRED (the device was away longer than the server keeps deletions):
// the pull reads the whole tenant again (`since: null`) in one synchronize() call
// with WatermelonDB's `replacement` strategy, applied to records without unsynced
// changes: a synced local record it did not return goes; one created, edited or
// deleted here is kept and pushed (contract 3.6), and one gone meanwhile is
// answered CONFLICT with the DeletedItem, or NOT_FOUND (outside the member's view):
// the next pull lets it go, each unsynced change reported to `onRejected` with that
// code. Local edits of records it returned are merged and pushed. `onResync()` is told.
//
// INVALID_CURSOR for a page asked with the position's cursor (a server that did not
// sign it: CURSOR_SECRET rotated, or a server of an earlier release during a rollback
// or a rolling deploy, which does not read a later release's cursors): the read is
// asked again from its token (the position's `since`), in the same call, keeping what
// this call's pages brought (each entity comes again in a version no older); not a
// resync. A first sync not finished (no token yet) or a resync is read again as a
// resync (its earlier pages, applied, prove nothing: a first sync leaves deletions
// out). Once per sync() call: a second refusal is the call's error. A catch-up's
// cursor refused starts the catch-up again.
//
// TENANT_DELETED (an owner deleted the tenant), from a pull or a push: the module
// calls `database.unsafeResetDatabase()` (every table and the local storage: the
// copy and the unsent changes go), then `onTenantDeleted()`, and the call throws a
// SyncAPIError with code TENANT_DELETED. `resetOnTenantDeleted: false` leaves the
// reset to the app.
//
// NOT_A_MEMBER (FORBIDDEN with `extensions.reason` NOT_A_MEMBER, contract 3.5: the
// user was removed from the tenant, or the token no longer lists it), from a pull, a
// push or an entry of a push: the device lets go of the tenant. The synced tables'
// unsynced changes (WatermelonDB's own list of what a push would send) are read, the
// database is reset (`unsafeResetDatabase()`: the records, the unsent changes, the
// position in local storage and any local table, such as the bytes of photos
// attached offline), each unsynced change goes to `onRejected` with `reason`
// NOT_A_MEMBER, then `onNotAMember({ refused, error })`, and the call throws a
// SyncAPIError (code FORBIDDEN, `reason` NOT_A_MEMBER, `refused`). From then on this
// client asks nothing: `sync()` throws that error at once and `live()`'s sockets are
// closed. `resetOnNotAMember: false` leaves the reset to the app. `forgetTenant()`
// does the same without a request (the app signs out), each change refused with
// code SIGNED_OUT. A FORBIDDEN for the role (`reason` ROLE: a reader's write) is a
// REJECTED record as any other, and a network error or UNAVAILABLE fails the call:
// neither lets go of anything.
//
// Releases (docs/evolution.md): `release` (the catalog release the app's tables
// follow) goes with every request (X-Sync-Release) and in live()'s connection_init.
// With `migrationsEnabledAtVersion`, WatermelonDB passes pull a `migration` after a
// schema upgrade ({from, tables, columns: [{table, columns}]}): the pull first asks
// `catchUp` for those tables' types and columns' fields, up to the token of the last
// pull, then pulls on from that token. UPGRADE_REQUIRED (a retired release) is the
// thrown SyncAPIError's code. A server of an earlier release than the app's (a
// rollback) cannot validate its documents and says which release it serves: with
// the tables' `release` and `fieldReleases` (default 1), the synchronize() call asks
// again with that release's documents (all types when a table's is unknown to it:
// its changes end the page rather than being skipped). Its pages hold no field it
// does not know; records changing only what it knows are pushed, the others stay
// unsynced and sync() throws HELD_FOR_RELEASE (`servedRelease`, `held`) after the
// rest synced. Without anything to leave out, the error carries `servedRelease`.
//
// Tokens: `getToken()` is asked on every request; a request answered UNAUTHENTICATED
// asks `getToken({ refresh: true })` and is sent once more.
//
// Realtime: `live()` subscribes to `changesAvailable` (graphql-ws) and syncs on each
// event (coalesced: one sync at a time, one more after it when events came meanwhile).
import * as Q from "@nozbe/watermelondb/QueryDescription/index.js";
import { synchronize } from "@nozbe/watermelondb/sync/index.js";
import { fetchLocalChanges, getLastPulledAt } from "@nozbe/watermelondb/sync/impl/index.js";

const POSITION_KEY = "sync_api_position";
const REFERENCE = ["sha256", "size", "contentType"];

export class SyncAPIError extends Error {
  constructor(code, message, extra = {}) {
    super(`${code}: ${message}`);
    this.name = "SyncAPIError";
    this.code = code;
    Object.assign(this, extra);
  }
}

// The columns to add to each synced table's schema (tableSchema({ columns: [...] })).
export function syncColumns({ tokenColumn = "change_token" } = {}) {
  return [{ name: tokenColumn, type: "string", isOptional: true }];
}

// One sync client for a database: `sync()` (serialized: never two synchronize() at
// once), `live()` for realtime, `synchronizeArgs()` for an app that calls
// synchronize() itself.
export function createSyncAPI(options) {
  const {
    database,
    url,
    tenantID,
    getToken,
    tables: tableOptions,
    tokenColumn = "change_token",
    release = null,
    visibilitySince = null,
    migrationsEnabledAtVersion,
    limit = 500,
    pagesPerPull = 10,
    maxRounds = 10,
    resetOnTenantDeleted = true,
    resetOnNotAMember = true,
    onNotAMember,
    onRejected,
    onResync,
    onTenantDeleted,
    conflictResolver: appResolver,
    fetch: fetchImpl = (...args) => globalThis.fetch(...args),
  } = options;
  if (!database || !url || !tenantID || !tableOptions) {
    throw new TypeError("createSyncAPI: database, url, tenantID and tables are required");
  }

  // tables: { people: { type: "PERSON", typeName?: "Person", columns: { givenName: "given_name" }, attachments: ["photo"] } }
  const tables = {};
  const tableOfType = {};
  const tableOfTypename = {};
  for (const [table, spec] of Object.entries(tableOptions)) {
    const typeName = spec.typeName ?? spec.type.charAt(0) + spec.type.slice(1).toLowerCase();
    const columns = spec.columns ?? {};
    const fields = Object.keys(columns);
    const attachments = new Set(spec.attachments ?? []);
    // Lists and objects: JSON-encoded string columns (`json`); an object field (or a
    // list of objects) selects its sub-fields (`objects`). scripts/generate-clients
    // writes both.
    const json = new Set(spec.json ?? []);
    const objects = spec.objects ?? {};
    const leaf = (f) =>
      attachments.has(f) ? `${f} { ${REFERENCE.join(" ")} }` : objects[f] ? `${f} { ${objects[f].join(" ")} }` : f;
    // The releases that added the type (`release`) and each field (`fieldReleases`),
    // default 1: what a server of an earlier release can be asked (a rollback).
    const fieldReleases = spec.fieldReleases ?? {};
    const fieldsAt = (served) => (served === null ? fields : fields.filter((f) => (fieldReleases[f] ?? 1) <= served));
    tables[table] = {
      table,
      type: spec.type,
      typeName,
      key: typeName.charAt(0).toLowerCase() + typeName.slice(1),
      columns,
      fields,
      fieldOfColumn: Object.fromEntries(fields.map((f) => [columns[f], f])),
      attachments,
      json,
      release: spec.release ?? 1,
      fieldsAt,
      selectionAt: (served) => `... on ${typeName} { changeToken ${fieldsAt(served).map(leaf).join(" ")} }`,
      selection: `... on ${typeName} { changeToken ${fields.map(leaf).join(" ")} }`,
    };
    tableOfType[spec.type] = table;
    tableOfTypename[typeName] = table;
  }
  const types = Object.values(tables).map((t) => t.type);
  // The documents this module sends, of the app's release (null) or, during a
  // rollback, of the earlier release a server serves: its tables (types) and fields.
  const documentsAt = new Map();
  function documents(served) {
    if (documentsAt.has(served)) return documentsAt.get(served);
    const kept = Object.values(tables).filter((t) => served === null || t.release <= served);
    // LeftViewItem (contract 3.12) from the app's `visibilitySince` release on: a
    // server of an earlier release has no such type (nor sends one).
    const leftView = visibilitySince !== null && (served ?? release ?? 0) >= visibilitySince;
    const selection =
      `__typename id ${kept.map((t) => t.selectionAt(served)).join(" ")} ... on DeletedItem { type changeToken }` +
      (leftView ? " ... on LeftViewItem { type changeToken }" : "");
    const docs = {
      served,
      // Some left out: asking that release's server is worth it.
      partial: served !== null && (kept.length < types.length || kept.some((t) => t.fieldsAt(served).length < t.fields.length)),
      // A type that release lacks cannot be named: all types, whose changes of a type
      // the server lacks end its page (it does not skip them, as `types` would).
      types: kept.length < types.length ? null : types,
      selection,
      page: `query($t: ID!, $since: ID, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {
    changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit, types: $types) {
      items { ${selection} } cursor changeToken } }`,
      catchUp: `query($t: ID!, $upTo: ID!, $types: [DeletedItemType!], $fields: [String!], $cursor: String, $limit: Int) {
    catchUp(tenantID: $t, upTo: $upTo, types: $types, fields: $fields, cursor: $cursor, limit: $limit) {
      items { ${selection} } cursor } }`,
      push: `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {
            clientMutationID status replayed error { code message reason } item { ${selection} } } } }`,
    };
    documentsAt.set(served, docs);
    return docs;
  }
  // The release whose documents this synchronize() call asks with: null (the app's)
  // until a server of an earlier one refuses them (a rollback); each call's pull
  // asks with the app's first, so a server of its release, back, answers whole.
  let asked = null;
  // The release the last answer said its server serves (every answer says it).
  let answeredRelease = null;
  // A request with the documents of `asked`; refused by a server of an earlier
  // release (`servedRelease`) whose documents leave something out, `asked` becomes
  // it and the request is asked again (a push's caller rebuilds its mutations).
  async function ask(kind, variables) {
    for (let attempt = 1; ; attempt++) {
      const docs = documents(asked);
      const vars = kind === "page" ? { ...variables, types: docs.types } : variables;
      try {
        const data = await request(docs[kind], vars);
        // An earlier release's documents answered by a server of a later one (a
        // rolling deploy behind one address): its versions may hold fields they did
        // not select, and a page stored so would move the token past them. Asked
        // again with the app's (a push's answer is not: its rows hold those fields).
        if (asked !== null && kind !== "push" && answeredRelease > asked) {
          if (attempt >= 3) {
            throw new SyncAPIError("UNAVAILABLE", "servers of several releases answered in turn (a rolling deploy): sync again");
          }
          asked = null;
          continue;
        }
        return data;
      } catch (error) {
        const served = error.servedRelease;
        if (attempt >= 3 || !Number.isInteger(served) || (asked !== null && served >= asked) || !documents(served).partial) throw error;
        asked = served;
        if (kind === "push") throw Object.assign(error, { askAgain: true });
      }
    }
  }

  // What WatermelonDB's migration sync names (`{from, tables, columns: [{table,
  // columns}]}`), as the API's catchUp names it: the type codes of the tables it
  // created, and "Type.field" for the columns it added. Tables and columns this
  // module does not sync are left out.
  function catchUpOf(migration) {
    const newTypes = (migration.tables ?? []).filter((table) => tables[table]).map((table) => tables[table].type);
    const fields = [];
    for (const { table, columns } of migration.columns ?? []) {
      const t = tables[table];
      if (!t || newTypes.includes(t.type)) continue;
      for (const column of columns) {
        const f = t.fieldOfColumn[column];
        if (f !== undefined) fields.push(`${t.typeName}.${f}`);
      }
    }
    return { types: newTypes, fields };
  }

  // What this client learned that the next pull must apply, whatever its pages hold:
  const known = new Map(); // "table/id" -> { raw } | { deleted: true }: conflicts' current versions
  const revert = new Set(); // "table/id": rejected, the server's state wins
  const sent = new Map(); // "table/id" -> { raw, token }: applied in a push not yet marked synced
  let pushedSomething = false;
  let morePages = false;
  // A read (a since, then its cursors) ends at the bound its first page set. `calls`
  // counts sync() calls; `readCall` is the one whose pull began the read being paged
  // (null: begun before this process, its position resumed from local storage).
  let calls = 0;
  let readCall = null;
  let behind = false; // the read that just ended began before this sync() call
  let resetDone = false;
  // The sync() call (or, for an app calling synchronize() itself, the pull) whose
  // read a refused cursor (INVALID_CURSOR) restarted: once per call, a second
  // refusal is its error.
  let cursorRestartedIn = null;
  let pulls = 0;
  let syncing = false; // within syncOnce()
  let heldBy = null; // the last push's held records, and the release served
  const stats = { requests: 0, pages: 0, items: 0, pushed: 0, conflicts: 0, rejected: 0, resyncs: 0, rounds: 0, caughtUp: 0 };

  // --- transport -----------------------------------------------------------------
  async function request(query, variables) {
    if (lost) throw lost; // this device let go of the tenant: nothing more is asked
    for (let attempt = 0; ; attempt++) {
      const token = getToken ? await getToken({ refresh: attempt > 0 }) : null;
      stats.requests++;
      const response = await fetchImpl(url, {
        method: "POST",
        headers: { "content-type": "application/json", ...authHeaders(token, release) },
        body: JSON.stringify({ query, variables }),
      });
      const body = await response.json().catch(() => ({}));
      const error = body.errors?.[0];
      const code = error?.extensions?.code ?? (body.data ? null : `HTTP_${response.status}`);
      if ((code === "UNAUTHENTICATED" || response.status === 401) && attempt === 0 && getToken) continue;
      if (code) {
        if (code === "TENANT_DELETED") await tenantDeleted();
        if (isNotAMember(error?.extensions)) throw await letGo({ code, reason: "NOT_A_MEMBER", message: error.message });
        // A server of an earlier release than the app's could not validate the
        // document (a rollback): it says which release it serves (`servedRelease`).
        const served = body.extensions?.release;
        throw new SyncAPIError(code, error?.message ?? response.statusText, {
          extensions: error?.extensions,
          ...(Number.isInteger(served) && release && served < release ? { servedRelease: served } : {}),
        });
      }
      answeredRelease = body.extensions?.release;
      return body.data;
    }
  }

  // NOT_A_MEMBER (or the app signing out: `error.code` SIGNED_OUT): once; the error
  // every later call throws.
  let lost = null;
  let letting = null;
  const liveStops = new Set();
  function letGo(error) {
    letting ??= forget(error);
    return letting;
  }
  // Records a pull deletes: WatermelonDB destroys each, unsynced changes and all, so
  // each of those changes is reported refused before the pull is applied, never
  // dropped unsaid; none is pushed (the record is gone from the database). `gone`:
  // "table/id" -> why: LEFT_VIEW (a LeftViewItem, contract 3.12: the server is told
  // nothing), CONFLICT with the DeletedItem as `current` (another device deleted it:
  // the server's answer to a write of a deleted record, contract 3.2), or the
  // NOT_FOUND a push of it was answered (outside the member's view, found after a
  // resync, which sends no sentinel). A local deletion is refused only for LEFT_VIEW
  // (the record is deleted, or was never to be deleted by this member).
  async function dropped(gone) {
    const { changes } = await fetchLocalChanges(database);
    for (const [table, { created, updated, deleted }] of Object.entries(changes)) {
      if (!tables[table]) continue;
      for (const [kind, raws] of [["update", updated], ["create", created]]) {
        for (const raw of raws) {
          const error = gone.get(keyOf(table, raw.id));
          if (error) onRejected?.({ table, id: raw.id, kind, raw, ...error });
        }
      }
      for (const id of deleted) {
        const error = gone.get(keyOf(table, id));
        if (error?.code === "LEFT_VIEW") onRejected?.({ table, id, kind: "delete", ...error });
      }
    }
  }
  const leftViewError = { code: "LEFT_VIEW", reason: null, message: "the record left your view before this change was synced" };
  const deletedError = (item) => ({
    code: "CONFLICT",
    reason: null,
    message: "the record was deleted on the server before this change was synced",
    current: { __typename: item.__typename, id: item.id, type: item.type, changeToken: item.changeToken },
  });
  async function forget(error) {
    const refused = [];
    const { changes } = await fetchLocalChanges(database);
    for (const [table, { created, updated, deleted }] of Object.entries(changes)) {
      if (!tables[table]) continue;
      for (const raw of created) refused.push({ table, id: raw.id, kind: "create", raw, ...error });
      for (const raw of updated) refused.push({ table, id: raw.id, kind: "update", raw, ...error });
      for (const id of deleted) refused.push({ table, id, kind: "delete", ...error });
    }
    lost = new SyncAPIError(error.code, error.message, { reason: error.reason ?? null, refused });
    for (const stop of liveStops) await stop();
    if (resetOnNotAMember) {
      await database.write(() => database.unsafeResetDatabase(), "sync-api-not-a-member");
    }
    for (const change of refused) onRejected?.(change);
    await onNotAMember?.({ refused, error: lost });
    return lost;
  }
  // The app signs out: as on NOT_A_MEMBER, once the sync under way has ended, and
  // without a request. Answers the refused changes.
  async function forgetTenant() {
    await running?.catch(() => {});
    const error = await letGo({ code: "SIGNED_OUT", message: "the app let go of the tenant before this change was pushed" });
    return error.refused;
  }

  async function tenantDeleted() {
    if (resetDone) return;
    resetDone = true;
    if (resetOnTenantDeleted) {
      await database.write(() => database.unsafeResetDatabase(), "sync-api-tenant-deleted");
    }
    await onTenantDeleted?.();
  }

  // --- records <-> API items -----------------------------------------------------
  const keyOf = (table, id) => `${table}/${id}`;
  // `served`: answered with that release's documents, to a push (not a page, whose
  // versions hold no field it lacks): the fields it left out are not in the raw, so
  // WatermelonDB's merge keeps the local values.
  function itemToRaw(t, item, served = null) {
    const raw = { id: item.id, [tokenColumn]: item.changeToken };
    for (const f of t.fieldsAt(served)) {
      const value = item[f] ?? null;
      raw[t.columns[f]] =
        value === null ? null
        : t.attachments.has(f) ? JSON.stringify(pick(value))
        : t.json.has(f) ? JSON.stringify(withoutNulls(value))
        : value;
    }
    return raw;
  }
  function fieldValue(t, field, value) {
    if (value === undefined || value === "") return null; // WatermelonDB's empty column
    if (t.attachments.has(field) && value !== null) return pick(typeof value === "string" ? JSON.parse(value) : value);
    if (t.json.has(field) && typeof value === "string") return JSON.parse(value);
    return value;
  }
  function fieldsOf(t, raw, columns) {
    const out = {};
    for (const column of columns) {
      const f = t.fieldOfColumn[column];
      if (f !== undefined) out[f] = fieldValue(t, f, raw[column]);
    }
    return out;
  }
  const syncedColumns = (t) => t.fields.map((f) => t.columns[f]);

  // --- position in local storage ---------------------------------------------------
  async function positions() {
    const stored = await database.adapter.getLocal(POSITION_KEY);
    return stored ? JSON.parse(stored) : {};
  }
  async function positionOf(lastPulledAt) {
    if (!lastPulledAt) return { since: null, cursor: null };
    const position = (await positions())[String(lastPulledAt)];
    // A database synced before without this module's position: read everything again.
    return position ?? { since: null, cursor: null, resync: true };
  }

  // --- pull ------------------------------------------------------------------------
  async function pullChanges({ lastPulledAt, migration }) {
    pulls++;
    pushedSomething = false; // a new synchronize() call: this pull brings the last push's tokens
    asked = null;
    heldBy = null;
    const start = await positionOf(lastPulledAt);
    let { since, cursor } = start;
    let resync = Boolean(start.resync);
    const changes = Object.fromEntries(Object.keys(tables).map((n) => [n, { created: [], updated: [], deleted: [] }]));
    const latest = new Map(); // "table/id" -> raw | null (deleted): the last version seen
    const gone = new Map(); // "table/id" -> why its unsynced changes go (dropped)
    const remember = (items) => {
      for (const item of items) {
        stats.items++;
        if (item.__typename === "DeletedItem" || item.__typename === "LeftViewItem") {
          // A record that left the member's view goes as a deletion's does (destroyed
          // here, nothing pushed for it); the unsynced changes of both are reported
          // (dropped).
          const table = tableOfType[item.type];
          if (!table) continue;
          const key = keyOf(table, item.id);
          latest.set(key, null);
          gone.set(key, item.__typename === "LeftViewItem" ? leftViewError : deletedError(item));
        } else {
          const table = tableOfTypename[item.__typename];
          if (table) latest.set(keyOf(table, item.id), itemToRaw(tables[table], item));
          if (table) gone.delete(keyOf(table, item.id));
        }
      }
    };
    // A migration sync (the app's schema grew: new tables, new columns): what the
    // earlier schema's pulls left out, up to the token they reached, from catchUp
    // (docs/evolution.md); then the pull goes on from that token as usual, now
    // selecting the new columns too. WatermelonDB passes the migration again until
    // a pull succeeds, so an interrupted catch-up is asked again whole.
    const owed = migration && lastPulledAt && !resync ? catchUpOf(migration) : null;
    if (owed && (owed.types.length || owed.fields.length)) {
      // The read goes on from its token, not its cursor: the pages read before it
      // selected fewer columns (a first read not finished reads it all again).
      cursor = null;
      if (since !== null) {
        for (let after = null; ; ) {
          const variables = { t: tenantID, upTo: since, cursor: after, limit: Math.min(limit, 1000) };
          let data;
          try {
            data = await ask("catchUp", { ...variables, types: owed.types.length ? owed.types : null, fields: owed.fields.length ? owed.fields : null });
          } catch (error) {
            if (!(after && cursorRefused(error))) throw error;
            after = null; // the catch-up again from its first page: what it brought stays
            continue;
          }
          stats.pages++;
          stats.caughtUp += data.catchUp.items.length;
          remember(data.catchUp.items);
          after = data.catchUp.cursor;
          if (!after) break;
        }
      }
    }
    if (!cursor) readCall = calls; // a read begins: its bound is after this call began
    const page = async () => {
      const data = await ask("page", { t: tenantID, since: cursor ? null : since, cursor, limit });
      stats.pages++;
      remember(data.changes.items);
      cursor = data.changes.cursor;
      if (!cursor) since = data.changes.changeToken ?? since;
    };
    for (let read = 0; ; ) {
      try {
        await page();
        read++;
      } catch (error) {
        const refused = Boolean(cursor) && cursorRefused(error);
        if (refused && since !== null) {
          // A cursor the server did not sign (CURSOR_SECRET rotated, a server of an
          // earlier release): the read again from its token, in this call. Every
          // change after it comes again, each entity in a version no older than one
          // this call's pages (in `latest`) or an earlier call's brought.
          cursor = null;
          readCall = calls;
          continue;
        }
        if ((error.code === "RESYNC_REQUIRED" || refused) && !(resync && since === null && cursor === null)) {
          // Away longer than the retention, or a cursor refused in a read with no
          // token (a first sync not finished, or a resync: what its earlier pages
          // applied proves nothing, a first sync leaves deletions out): the whole
          // tenant again, in this one call, replacing the local copy.
          resync = true;
          since = null;
          cursor = null;
          readCall = calls;
          latest.clear(); // the catch-up's too: the whole tenant comes again
          stats.resyncs++;
          await onResync?.();
          continue;
        }
        throw error;
      }
      if (!cursor) break;
      if (!resync && read >= pagesPerPull) break; // the rest in the next synchronize()
    }
    morePages = Boolean(cursor);
    behind = !cursor && readCall !== calls;
    // Conflicts' current versions and reverts: added unless the pages hold a newer one.
    for (const [key, value] of known) {
      if (latest.has(key)) continue;
      latest.set(key, value.deleted ? null : value.raw);
      if (value.refused) gone.set(key, value.refused); // a push met the deletion, or NOT_FOUND
    }
    known.clear();
    for (const [key, raw] of latest) if (raw === null) revert.delete(key); // gone: nothing to revert
    for (const [key, raw] of latest) {
      const [table, id] = splitKey(key);
      if (raw === null) changes[table].deleted.push(id);
      else changes[table].updated.push(raw);
    }
    if (gone.size) await dropped(gone);
    // The position under the timestamp WatermelonDB saves with these records.
    const timestamp = Math.max(Date.now(), (lastPulledAt ?? 0) + 1);
    const keep = { [String(timestamp)]: { since, cursor } };
    if (lastPulledAt) keep[String(lastPulledAt)] = start;
    await database.adapter.setLocal(POSITION_KEY, JSON.stringify(keep));
    // A resync replaces only records without unsynced changes: a record it did not
    // return (deleted, or outside the member's view: it cannot tell) is kept while
    // this device edited it, and pushed (contract 3.6); the server's answer says
    // which, and the next pull lets it go, the change reported (dropped).
    const strategy = {
      default: "replacement",
      override: {},
      experimentalQueryRecordsForReplacement: Object.fromEntries(Object.keys(tables).map((table) => [table, () => [Q.where("_status", "synced")]])),
    };
    return resync ? { changes, timestamp, experimentalStrategy: strategy } : { changes, timestamp };
  }

  // INVALID_CURSOR for a request that sent a cursor, the first in this sync() call:
  // the read is asked again without it.
  function cursorRefused(error) {
    const call = syncing ? `sync ${calls}` : `pull ${pulls}`;
    if (error.code !== "INVALID_CURSOR" || cursorRestartedIn === call) return false;
    cursorRestartedIn = call;
    return true;
  }

  // WatermelonDB's per-column merge (local changed columns win), then: a record this
  // client pushed and the server applied takes the server's version, plus the edits
  // made since that push; a column whose local value the server now holds is no
  // longer a local change (a record with none left is synced); a rejected record
  // takes the server's state.
  function conflictResolver(table, local, remote, resolved) {
    const t = tables[table];
    if (!t) return appResolver ? appResolver(table, local, remote, resolved) : resolved;
    const key = keyOf(table, local.id);
    const columns = syncedColumns(t);
    let out = resolved;
    if (revert.has(key)) {
      revert.delete(key);
      out = { ...local, ...remote, id: local.id, _status: "synced", _changed: "" };
    } else if (local._status !== "deleted") {
      const pushed = sent.get(key);
      let changed;
      if (pushed) {
        sent.delete(key);
        changed = columns.filter((c) => !same(local[c], pushed.raw[c]));
        out = { ...local, ...remote, id: local.id };
        for (const c of changed) out[c] = local[c];
      } else if (local._status === "created") {
        // Created here, and the server holds it: its create was applied. Columns
        // that differ are this device's edits since (a restart lost what it sent).
        changed = columns.filter((c) => c in remote && !same(local[c], remote[c]));
        for (const c of changed) out[c] = local[c];
      } else {
        changed = (local._changed ? local._changed.split(",") : []).filter((c) => !(c in remote) || !same(local[c], remote[c]));
      }
      out = { ...out, _status: changed.length ? "updated" : "synced", _changed: changed.join(",") };
    }
    return appResolver ? appResolver(table, local, remote, out) : out;
  }

  // --- push ------------------------------------------------------------------------
  async function pushChanges({ changes, lastPulledAt }) {
    // The token of the copy these edits were made on: a push from a deleted tenant's
    // copy is TENANT_DELETED, entry by entry, and writes nothing (contract 3.8).
    const { since: pushedSince } = await positionOf(lastPulledAt);
    const entries = [];
    for (const [table, set] of Object.entries(changes)) {
      const t = tables[table];
      if (!t) continue;
      for (const raw of set.created) {
        const fields = fieldsOf(t, raw, syncedColumns(t));
        entries.push({ t, id: raw.id, raw, kind: "create", mutation: { [`create${t.typeName}`]: { tenantID, id: raw.id, [t.key]: fields } } });
      }
      for (const raw of set.updated) {
        const columns = raw._changed ? raw._changed.split(",") : syncedColumns(t);
        const fields = fieldsOf(t, raw, columns);
        const token = raw[tokenColumn];
        if (!token) {
          entries.push({ t, id: raw.id, raw, kind: "create", mutation: { [`create${t.typeName}`]: { tenantID, id: raw.id, [t.key]: fieldsOf(t, raw, syncedColumns(t)) } } });
        } else if (Object.keys(fields).length) {
          entries.push({ t, id: raw.id, raw, kind: "update", mutation: { [`update${t.typeName}`]: { tenantID, id: raw.id, changeToken: token, changes: fields } } });
        }
      }
      if (set.deleted.length) {
        const rows = new Map((await deletedRows(table, set.deleted)).map((r) => [r.id, r]));
        for (const id of set.deleted) {
          const token = rows.get(id)?.[tokenColumn];
          entries.push({ t, id, row: rows.get(id), kind: "delete", mutation: { [`delete${t.typeName}`]: { tenantID, id, changeToken: token ?? "0".repeat(26) } } });
        }
      }
    }
    // Served by a server of an earlier release (the pull found it, or a push batch
    // does): an entry of a type it lacks, or setting, changing or (a deletion)
    // clearing a field it lacks, waits for a server of the app's release; the others
    // go without the fields it lacks (a create's unset ones).
    const held = [];
    const holds = (e) => {
      if (asked === null) return false;
      if (e.t.release > asked) return true;
      const known = new Set(e.t.fieldsAt(asked));
      const body = Object.values(e.mutation)[0];
      if (e.kind === "delete") return e.t.fields.some((f) => !known.has(f) && fieldValue(e.t, f, e.row?.[e.t.columns[f]]) !== null);
      const set = e.kind === "create" ? body[e.t.key] : body.changes;
      if (Object.entries(set).some(([f, v]) => !known.has(f) && (e.kind === "update" || v !== null))) return true;
      if (e.kind === "create") body[e.t.key] = Object.fromEntries(Object.entries(set).filter(([f]) => known.has(f)));
      return false;
    };
    const hold = (list) => list.filter((e) => (holds(e) ? (held.push(e), false) : true));
    let conflict = null;
    let retryable = null;
    let gone = null;
    let notAMember = null; // an entry refused NOT_A_MEMBER: the device lets go
    const refusedDeletions = new Set(); // "table/id"
    let pending = hold(entries);
    for (let round = 0; pending.length && round < 5; round++) {
      const again = [];
      for (let i = 0; i < pending.length; i += 100) {
        const batch = pending.slice(i, i + 100);
        for (const e of batch) {
          const body = Object.values(e.mutation)[0];
          delete body.clientMutationID;
          body.clientMutationID = await mutationID(e.t.table, e.id, e.mutation);
        }
        const served = asked;
        let data;
        try {
          data = await ask("push", { i: { tenantID, mutations: batch.map((e) => e.mutation), since: pushedSince ?? null } });
        } catch (error) {
          if (!error.askAgain) throw error;
          // A server of an earlier release (a rolling deploy): this batch and the
          // rest again, with its documents, in this round.
          again.push(...hold(pending.slice(i)));
          break;
        }
        data.pushChanges.results.forEach((result, n) => {
          const e = batch[n];
          const key = keyOf(e.t.table, e.id);
          const item = result.item;
          const deletedItem = item?.__typename === "DeletedItem";
          if (result.status === "APPLIED") {
            stats.pushed++;
            pushedSomething = true;
            if (e.raw) sent.set(key, { raw: e.raw, token: item?.changeToken });
          } else if (result.status === "CONFLICT") {
            stats.conflicts++;
            if (e.kind === "delete") {
              if (!deletedItem && item) {
                // A deletion wins over a concurrent edit: again, with the current token.
                const body = Object.values(e.mutation)[0];
                body.changeToken = item.changeToken;
                again.push(e);
              }
              return; // already deleted: done
            }
            known.set(key, deletedItem ? { deleted: true, refused: deletedError(item) } : !item ? { deleted: true } : { raw: itemToRaw(e.t, item, served) });
            conflict ??= new SyncAPIError("CONFLICT", `${e.t.table} ${e.id}: the server holds a newer version`, { table: e.t.table, id: e.id });
          } else {
            const code = result.error?.code;
            if (isNotAMember(result.error)) {
              notAMember ??= result.error;
            } else if (code === "TENANT_DELETED") {
              gone ??= new SyncAPIError(code, result.error.message);
            } else if (code === "UNAVAILABLE") {
              retryable ??= new SyncAPIError("UNAVAILABLE", result.error.message, { retryable: true });
            } else if (code === "NOT_FOUND" && e.kind === "delete") {
              // Nothing to delete: never reached the server.
            } else if (code === "ALREADY_EXISTS" || code === "NOT_FOUND") {
              // NOT_FOUND for an edit: the record is outside the member's view (ids are
              // never reused; a deleted one answers CONFLICT). Should the lookup find
              // nothing, the next pull destroys it and reports the change with it.
              const refused = { code, reason: null, message: result.error?.message ?? code };
              known.set(key, { lookup: true, ...(code === "NOT_FOUND" ? { refused } : {}) });
              conflict ??= new SyncAPIError("CONFLICT", `${e.t.table} ${e.id}: ${code}`, { table: e.t.table, id: e.id });
            } else {
              stats.rejected++;
              (e.kind === "delete" ? refusedDeletions : revert).add(key);
              known.set(key, { lookup: true });
              onRejected?.({ table: e.t.table, id: e.id, code, reason: result.error?.reason ?? null, message: result.error?.message, kind: e.kind, raw: e.raw });
            }
          }
        });
      }
      pending = again;
    }
    if (notAMember) throw await letGo({ code: "FORBIDDEN", reason: "NOT_A_MEMBER", message: notAMember.message });
    if (gone) {
      await tenantDeleted();
      throw gone;
    }
    // Ids whose server state the next pull must bring, whatever its pages hold.
    for (const [key, value] of known) {
      if (!value.lookup) continue;
      const [table, id] = splitKey(key);
      const t = tables[table];
      const data = await request(`query($t: ID!, $id: ID!) { ${t.key}(tenantID: $t, id: $id) { __typename id ${t.selectionAt(asked)} } }`, { t: tenantID, id });
      const item = data[t.key];
      known.set(key, item ? { raw: itemToRaw(t, item, asked) } : { deleted: true, refused: value.refused });
    }
    const restored = await restoreRefusedDeletions(refusedDeletions);
    if (retryable) throw retryable;
    if (conflict) throw conflict; // synchronize() fails: pull, merge, push again
    // Rejected records stay out of "synced": the next pull reverts them. A restored
    // record too: WatermelonDB would otherwise destroy the row of that id as a
    // deletion pushed (SQLite's destroyDeletedRecords deletes by id, whatever the row).
    const rejected = {};
    for (const key of [...revert, ...restored]) {
      const [table, id] = splitKey(key);
      (rejected[table] ??= []).push(id);
    }
    // Held records stay out of "synced" too (not reverted): pushed by a later sync.
    for (const e of held) (rejected[e.t.table] ??= []).push(e.id);
    heldBy = held.length ? { servedRelease: asked, records: held.map((e) => ({ table: e.t.table, id: e.id })) } : null;
    return Object.keys(rejected).length ? { experimentalRejectedIds: rejected } : {};
  }

  // Deletions the server refused, put back as the server holds them (its state is in
  // `known`, looked up above). A pull cannot do it: WatermelonDB skips a pulled update
  // of a record it holds as deleted ("record was locally deleted, deletion will be
  // pushed later", sync/impl/applyRemote.js), and the deletion would be pushed and
  // refused again on every round. As applyRemote does for a record it is told to
  // create and holds as deleted: the deleted row is destroyed and the server's version
  // created, synced, in one writer; the row's columns this module does not sync are
  // kept. Gone on the server too: nothing to restore, the deletion stands (and the
  // next pull's DeletedItem destroys the row, should this push fail). Answers the
  // keys restored.
  async function restoreRefusedDeletions(keys) {
    const byTable = new Map();
    for (const key of keys) {
      const server = known.get(key);
      if (!server?.raw) continue;
      known.delete(key); // restored below: nothing for the next pull to bring
      const [table] = splitKey(key);
      if (!byTable.has(table)) byTable.set(table, []);
      byTable.get(table).push(server.raw);
    }
    if (!byTable.size) return [];
    const restored = [];
    await database.write(async () => {
      const creates = [];
      for (const [table, raws] of byTable) {
        const ids = raws.map((raw) => raw.id);
        const rows = new Map((await deletedRows(table, ids)).map((row) => [row.id, row]));
        const here = raws.filter((raw) => rows.get(raw.id)?._status === "deleted"); // not destroyed meanwhile
        if (!here.length) continue;
        await database.adapter.destroyDeletedRecords(table, here.map((raw) => raw.id));
        for (const raw of here) {
          const row = { ...rows.get(raw.id), ...raw, _status: "synced", _changed: "" };
          creates.push(database.get(table).prepareCreateFromDirtyRaw(row));
          restored.push(keyOf(table, raw.id));
        }
      }
      await database.batch(creates);
    }, "sync-api-refused-deletion");
    return restored;
  }

  // The rows of records deleted locally (WatermelonDB passes only their ids; the rows
  // stay, marked deleted, until the push), for their change tokens: a raw query
  // without the not-deleted filter that collection queries add.
  async function deletedRows(table, ids) {
    const query = { table, description: Q.buildQueryDescription([Q.where("id", Q.oneOf(ids))]), associations: [] };
    try {
      return await database.adapter.unsafeQueryRaw(query);
    } catch {
      return [];
    }
  }

  // --- one sync ------------------------------------------------------------------
  const synchronizeArgs = () => ({
    database,
    pullChanges,
    pushChanges,
    sendCreatedAsUpdated: true,
    conflictResolver,
    ...(migrationsEnabledAtVersion ? { migrationsEnabledAtVersion } : {}),
  });

  // synchronize() until nothing is left: the remaining pages of a long pull, a pull
  // from the end of a read resumed from an earlier call, a round after a conflict,
  // and a pull after a push that wrote (the new change tokens).
  async function syncOnce() {
    calls++;
    syncing = true;
    try {
      return await syncRounds();
    } finally {
      syncing = false;
    }
  }
  async function syncRounds() {
    for (let round = 1, extra = 0; ; round++) {
      stats.rounds++;
      morePages = false;
      behind = false;
      pushedSomething = false;
      try {
        await synchronize(synchronizeArgs());
      } catch (error) {
        if (lost) throw lost;
        if (error.code === "TENANT_DELETED" || /database was reset/.test(error.message ?? "")) {
          if (!resetDone) await tenantDeleted();
          throw error.code === "TENANT_DELETED" ? error : new SyncAPIError("TENANT_DELETED", "the tenant was deleted");
        }
        if (error.code === "CONFLICT" && ++extra < maxRounds) continue;
        throw error;
      }
      if (!(morePages || behind || pushedSomething || known.size)) return finished();
      if (!morePages && ++extra >= maxRounds) return finished(); // edits keep coming: later
    }
  }
  // Records held for a server of the app's release (a rollback): the rest is synced,
  // and the call throws, naming the release served, as a refused sync does.
  function finished() {
    if (!heldBy) return { ...stats };
    const { servedRelease, records } = heldBy;
    throw new SyncAPIError("HELD_FOR_RELEASE", `${records.length} record(s) wait for a server of release ${release}: a server of release ${servedRelease} does not know a field or type they change`, { servedRelease, held: records, stats: { ...stats } });
  }

  // One sync at a time; a call while one runs waits for the one after it.
  let running = null;
  let queued = null;
  function sync() {
    if (lost) return Promise.reject(lost);
    if (queued) return queued;
    if (running) {
      queued = running.catch(() => {}).then(() => {
        queued = null;
        return sync();
      });
      return queued;
    }
    running = syncOnce().finally(() => {
      running = null;
    });
    return running;
  }

  // changesAvailable -> sync(). Node before 22 has no global WebSocket: pass
  // `webSocketImpl` (the `ws` package). Returns stop().
  function live({ wsUrl, webSocketImpl, onError, keepAlive = 300_000 } = {}) {
    let client = null;
    let unsubscribe = null;
    let stopped = false;
    const started = (async () => {
      const { createClient } = await import("graphql-ws/client");
      if (stopped) return;
      client = createClient({
        url: wsUrl ?? url.replace(/^http/, "ws"),
        webSocketImpl: webSocketImpl ?? globalThis.WebSocket,
        lazy: false,
        retryAttempts: Infinity,
        shouldRetry: () => true,
        keepAlive,
        connectionParams: async () => {
          const token = getToken ? await getToken({ refresh: false }) : null;
          return { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(release ? { release } : {}) };
        },
      });
      unsubscribe = client.subscribe(
        { query: `subscription($t: ID!) { changesAvailable(tenantID: $t) { changeToken } }`, variables: { t: tenantID } },
        {
          next: () => sync().catch((error) => onError?.(error)),
          // The subscription ended (TENANT_DELETED, FORBIDDEN): a sync meets the same
          // answer and handles it (a deleted tenant's copy is dropped).
          error: (error) => {
            onError?.(error);
            sync().catch((e) => onError?.(e));
          },
          complete: () => {},
        },
      );
    })();
    const stop = async () => {
      stopped = true;
      liveStops.delete(stop);
      await started;
      unsubscribe?.();
      await client?.dispose();
    };
    liveStops.add(stop);
    return stop;
  }

  // For an app calling synchronize() itself: true while another call is due (more
  // pages, a read that ended at a bound from before this process, a push that wrote,
  // server states learned from a push).
  const pending = () => morePages || behind || pushedSomething || known.size > 0;
  // A silent push's payload ({tenantID, changeToken}: APNs' JSON or FCM's data,
  // docs/realtime.md): sync when its token is ahead of the copy's position; false,
  // and no request, otherwise. The position is the one kept under the lastPulledAt
  // WatermelonDB saved with the records (a pull it did not save is not the copy's).
  async function onPush(payload) {
    const held = await positionOf(await getLastPulledAt(database));
    const since = held.cursor || held.resync ? null : held.since;
    if (!isPushAhead(payload, tenantID, since)) return false;
    await sync();
    return true;
  }
  return { sync, live, onPush, forgetTenant, pullChanges, pushChanges, conflictResolver, synchronizeArgs, pending, stats };
}

// Whether a silent push's payload is for `tenantID` and carries a change token newer
// than `since` (the copy's; null: none yet). Change tokens are ULIDs: their order is
// their text's.
export function isPushAhead(payload, tenantID, since) {
  const token = payload?.changeToken;
  if (payload?.tenantID !== tenantID || typeof token !== "string") return false;
  return since == null || token > since;
}

// One sync of `database`: synchronize() as many times as it takes (see createSyncAPI).
export function syncWithAPI(options) {
  return createSyncAPI(options).sync();
}

// FORBIDDEN because the caller has no access to the tenant (contract 3.5), not for
// its role: the one refusal a device lets go of the tenant for. `error`: a GraphQL
// error's extensions, or a push entry's error.
export function isNotAMember(error) {
  return error?.code === "FORBIDDEN" && error?.reason === "NOT_A_MEMBER";
}

// The headers of every request: the bearer token, and the app's catalog release.
function authHeaders(token, release) {
  return { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(release ? { "X-Sync-Release": String(release) } : {}) };
}

function splitKey(key) {
  const at = key.indexOf("/");
  return [key.slice(0, at), key.slice(at + 1)];
}

function pick(value) {
  return { sha256: value.sha256, size: value.size, contentType: value.contentType };
}

// A list or an object as a column holds it: an object's sub-fields that are set (the
// server answers the others null).
function withoutNulls(value) {
  if (Array.isArray(value)) return value.map((v) => (v !== null && typeof v === "object" ? withoutNulls(v) : v));
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined));
}

function same(a, b) {
  const norm = (v) => (v === undefined || v === "" ? null : v);
  return norm(a) === norm(b);
}

// A clientMutationID from what a mutation sends (its base token included): the same
// push resent after a lost response is replayed; any other edit is a new id.
async function mutationID(table, id, mutation) {
  const bytes = new TextEncoder().encode(JSON.stringify([table, id, mutation]));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return `wmdb-${Array.from(digest.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// Attachments (contract 3.10): a column holds a blob's reference as JSON
// (`{"sha256","size","contentType"}`, listed in the table's `attachments`), never a
// link (links expire). The bytes go straight to S3 before the record that references
// them is pushed: `uploadAttachment`, then set the column. Offline: `hashAttachment`
// gives the reference without a request; keep the bytes and upload them before the
// next sync (the recipe in README.md).
export async function hashAttachment(data, contentType = data?.type) {
  if (!contentType) throw new TypeError("attachment: a contentType is required (image/jpeg, application/pdf, ...)");
  const bytes = await toBytes(data);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  const sha256 = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  return { sha256, size: bytes.byteLength, contentType };
}

// Uploads bytes to the tenant unless it holds them already; answers the reference
// (store `JSON.stringify(ref)` in the attachment column). Throws a SyncAPIError with
// the API's code (FORBIDDEN, QUOTA_EXCEEDED, ...) or UPLOAD_FAILED; offline, fetch's
// own TypeError.
export async function uploadAttachment({ url, getToken, tenantID, data, contentType, release }) {
  const ref = await hashAttachment(data, contentType);
  const { requestUpload } = await call(
    { url, getToken, release },
    `mutation($t: ID!, $s: String!, $n: Int!, $c: String!) {
      requestUpload(tenantID: $t, sha256: $s, size: $n, contentType: $c) {
        alreadyPresent upload { url method headers { name value } } } }`,
    { t: tenantID, s: ref.sha256, n: ref.size, c: ref.contentType },
  );
  if (!requestUpload.alreadyPresent) {
    const { url: target, method, headers } = requestUpload.upload;
    const sent = headers.filter((h) => h.name.toLowerCase() !== "content-length").map((h) => [h.name, h.value]);
    const response = await fetch(target, { method, headers: sent, body: await toBytes(data) });
    if (!response.ok) throw new SyncAPIError("UPLOAD_FAILED", `${method} answered ${response.status}`, { status: response.status });
  }
  return ref;
}

// A fresh download link for a blob: `{sha256, size, contentType, url, urlExpiresAt}`.
export async function attachmentURL({ url, getToken, tenantID, release }, sha256) {
  const data = await call(
    { url, getToken, release },
    `query($t: ID!, $s: String!) { attachment(tenantID: $t, sha256: $s) { sha256 size contentType url urlExpiresAt } }`,
    { t: tenantID, s: sha256 },
  );
  return data.attachment;
}

async function call({ url, getToken, release }, query, variables) {
  const token = getToken ? await getToken({ refresh: false }) : null;
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...authHeaders(token, release) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json().catch(() => ({}));
  const error = body.errors?.[0];
  if (error || !body.data) {
    throw new SyncAPIError(error?.extensions?.code ?? `HTTP_${response.status}`, error?.message ?? response.statusText);
  }
  return body.data;
}

async function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof data?.arrayBuffer === "function") return new Uint8Array(await data.arrayBuffer());
  throw new TypeError("attachment bytes: a Blob, an ArrayBuffer or a typed array");
}
