// Replicate one RxDB collection of one synchronized type through the sync API.
//
//   import { replicateSyncAPI } from "@offline-sync-api/rxdb";
//   const state = replicateSyncAPI({
//     collection: db.people, url: "https://api.example.com/graphql",
//     tenantID: "family1", type: "PERSON",
//     headers: async () => ({ Authorization: `Bearer ${await token()}` }),
//   });
//
// Pull: RxDB's checkpoint is the API's `changes` position ({since} or {cursor}), and
// only this type's changes are read (`types: [type]`), in pages that stay full.
// Push: each row is a state-based `put<Type>` (the state RxDB assumes the server
// holds, and the new one) with `mergeFields`, so edits of different fields on two
// devices both survive RxDB's default conflict handler; a row keeps its
// clientMutationID while it is retried. Conflicts come back as RxDB master states
// (a DeletedItem is `_deleted: true`). A REJECTED row (bad data) is reported on the
// replication's `error$` and answered with the server's state, so it is not retried
// forever. `pull.stream$` is fed by the `changesAvailable` subscription when a
// WebSocket URL is given (`wsUrl`, default: `url` with ws/wss): one socket per
// replication state, opened on start and closed on pause and on cancel (RxDB's own
// socket, shared by URL, gains a second subscription on each start after a pause,
// so every change would be announced twice). The socket asks `headers()` for a
// token on each (re)connection: a server closing it 4403 at the token's expiry is
// answered by a reconnection with a fresh token.
//
// `fieldLevelConflictHandler` (for `addCollections`) keeps a device's edits of
// fields the server did not also change, where RxDB's default handler keeps the
// server's document whenever any field differs.
//
// RESYNC_REQUIRED (the device was away longer than the server keeps deletions,
// contract 3.6): the pull downloads the live data again (`since: null`), then
// marks every local document it did not return as deleted. RxDB applies that
// only to documents the device has not edited since its last sync: a local
// edit or create is kept and pushed (an update of a document deleted meanwhile
// comes back as a conflict with the deletion). `onResync` is told when one starts.
//
// TENANT_DELETED (an owner deleted the tenant, contract 3.8): the replication
// stops (cancel) and `onTenantDeleted` is called: the app drops its copy, for
// example with `collection.remove()`, outbox included.
import { createClient } from "graphql-ws/client";
import { defaultConflictHandler, deepEqual, newRxError } from "rxdb";
import { replicateGraphQL } from "rxdb/plugins/replication-graphql";
import { Subject } from "rxjs";

const DELETED = "_deleted";

export function replicateSyncAPI({
  collection,
  url,
  wsUrl,
  tenantID,
  type,
  headers = {},
  typeName,
  batchSize = 100,
  live = true,
  onRejected,
  onResync,
  onTenantDeleted,
  pull = {},
  push = {},
  ...rest
}) {
  const name = typeName ?? type.charAt(0) + type.slice(1).toLowerCase(); // PERSON -> Person
  const key = name.charAt(0).toLowerCase() + name.slice(1); // person
  const primary = collection.schema.primaryPath;
  const fields = Object.keys(collection.schema.jsonSchema.properties).filter(
    (f) => f !== primary && !f.startsWith("_"),
  );
  const headersNow = async () => (typeof headers === "function" ? await headers() : headers);
  const socketUrl = live && wsUrl !== false ? (wsUrl ?? url.replace(/^http/, "ws")) : null;
  const pokes$ = new Subject(); // a poke: pull from the checkpoint
  const pending = new Map(); // row content -> clientMutationID, while the row is retried
  // During a resync: the ids its pages returned (the checkpoint says a resync runs,
  // so one interrupted by a restart starts again from its first page).
  let resync = null;
  let state;

  const itemToDoc = (item) => {
    if (item.__typename === "DeletedItem") return { [primary]: item.id, [DELETED]: true };
    const doc = { [primary]: item.id, [DELETED]: false };
    for (const f of fields) if (item[f] !== null && item[f] !== undefined) doc[f] = item[f];
    return doc;
  };
  const docToState = (doc) => {
    if (doc[DELETED]) return { deleted: true };
    const set = {};
    for (const f of fields) if (doc[f] !== undefined && doc[f] !== null) set[f] = doc[f];
    return { deleted: false, [key]: set };
  };
  const selection = `__typename id ... on ${name} { ${fields.join(" ")} }`;
  const pullQuery = `query($t: ID!, $since: ID, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {
          changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit, types: $types) {
            items { ${selection} } cursor changeToken } }`;
  const startResync = () => {
    resync = { seen: new Set() };
    onResync?.();
  };
  // Every document of the collection the resync did not return, as deleted.
  const notReturned = async () => {
    const local = await collection.find().exec();
    return local
      .filter((doc) => !resync.seen.has(doc.primary))
      .map((doc) => ({ [primary]: doc.primary, [DELETED]: true }));
  };

  // A fresh id per row, kept while that row is retried (a lost response replays its
  // first result); dropped once the server answered, so a later identical edit
  // (a toggle back and forth) is a new mutation.
  const mutationIdOf = (row) => {
    const content = JSON.stringify([row.newDocumentState[primary], row.assumedMasterState ?? null, row.newDocumentState]);
    if (!pending.has(content)) pending.set(content, `rxdb-${crypto.randomUUID()}`);
    return { content, id: pending.get(content) };
  };
  const rowsById = new Map(); // clientMutationID -> { content, row }

  const serverState = async (id) => {
    const query = `query($t: ID!, $id: ID!) { ${key}(tenantID: $t, id: $id) { ${selection} } }`;
    const body = await state.graphQLRequest({ query, variables: { t: tenantID, id } });
    const item = body.data?.[key];
    return item ? itemToDoc(item) : { [primary]: id, [DELETED]: true };
  };

  state = replicateGraphQL({
    collection,
    url: { http: url }, // the socket is this module's (openSocket), not RxDB's
    live,
    // Headers may change (token refresh): asked for on every request.
    fetch: async (request) => {
      const merged = new Headers(request.headers);
      for (const [k, v] of Object.entries(await headersNow())) merged.set(k, v);
      return fetch(new Request(request, { headers: merged }));
    },
    pull: {
      batchSize,
      queryBuilder: (checkpoint, limit) => {
        const restart = checkpoint?.resync && resync === null; // interrupted: again
        if (restart) startResync();
        return {
          query: pullQuery,
          variables: {
            t: tenantID,
            since: restart || checkpoint?.cursor ? null : checkpoint?.since ?? null,
            cursor: restart ? null : checkpoint?.cursor ?? null,
            limit,
            types: [type],
          },
        };
      },
      responseModifier: async (data, origin, previous) => {
        if (origin === "stream") return "RESYNC"; // a poke: pull from the checkpoint
        const documents = data.items.map(itemToDoc);
        if (resync !== null) {
          for (const item of data.items) resync.seen.add(item.id);
          if (data.cursor) return { documents, checkpoint: { since: null, cursor: data.cursor, resync: true } };
          documents.push(...(await notReturned()));
          resync = null;
          return { documents, checkpoint: { since: data.changeToken, cursor: null, resync: false } };
        }
        // All keys always: RxDB stacks checkpoints key by key.
        const checkpoint = data.cursor
          ? { since: previous?.since ?? null, cursor: data.cursor, resync: false }
          : { since: data.changeToken ?? previous?.since ?? null, cursor: null, resync: false };
        return { documents, checkpoint };
      },
      ...pull,
    },
    push: {
      batchSize: Math.min(batchSize, 100),
      queryBuilder: (rows) => {
        const mutations = rows.map((row) => {
          const { content, id } = mutationIdOf(row);
          rowsById.set(id, { content, row });
          return {
            [`put${name}`]: {
              tenantID,
              id: row.newDocumentState[primary],
              assumed: row.assumedMasterState ? docToState(row.assumedMasterState) : null,
              state: docToState(row.newDocumentState),
              mergeFields: true,
              clientMutationID: id,
            },
          };
        });
        return {
          query: `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {
            clientMutationID status replayed error { code message } item { ${selection} } } } }`,
          variables: { i: { tenantID, mutations } },
        };
      },
      responseModifier: async (data) => {
        const conflicts = [];
        for (const result of data.results) {
          const sent = rowsById.get(result.clientMutationID);
          rowsById.delete(result.clientMutationID);
          if (sent) pending.delete(sent.content);
          const id = sent?.row.newDocumentState[primary];
          // Written during a resync: after its pages' bound, yet not gone.
          if (resync !== null && id !== undefined) resync.seen.add(id);
          if (result.status === "CONFLICT" && result.item) {
            conflicts.push(itemToDoc(result.item));
          } else if (result.status === "APPLIED" && result.item && sent && !result.item.__typename.startsWith("Deleted")) {
            // Merged with another device's edit: the server's state is the master now.
            const doc = itemToDoc(result.item);
            if (JSON.stringify(docToState(doc)) !== JSON.stringify(docToState(sent.row.newDocumentState))) {
              conflicts.push(doc);
            }
          } else if (result.status === "CONFLICT" || result.status === "REJECTED") {
            const error = newRxError("RC_PUSH", {
              pushRows: sent ? [sent.row] : [],
              errors: [result.error],
            });
            state.subjects.error.next(error);
            onRejected?.(sent?.row, result.error);
            if (result.error?.code === "UNAVAILABLE") throw error; // retryable: RxDB retries
            conflicts.push(await serverState(id));
          }
        }
        return conflicts;
      },
      ...push,
    },
    replicationIdentifier: `sync-api-${url}-${tenantID}-${type}`,
    ...rest,
  });
  // A pull refused with RESYNC_REQUIRED is asked again as the first page of a resync.
  const request = state.graphQLRequest.bind(state);
  let deleted = false;
  state.graphQLRequest = async (params) => {
    const body = await request(params);
    const code = body.errors?.[0]?.extensions?.code;
    if (code === "TENANT_DELETED" && !deleted) {
      deleted = true; // once: stop asking, and tell the app
      state.cancel();
      onTenantDeleted?.();
    }
    if (params.query !== pullQuery || code !== "RESYNC_REQUIRED") {
      return body;
    }
    startResync();
    return request({ ...params, variables: { ...params.variables, since: null, cursor: null } });
  };
  if (socketUrl) attachSocket(state, socketUrl, tenantID, headersNow, pokes$, pull.wsOptions);
  return state;
}

// One graphql-ws socket per replication state, carrying the changesAvailable
// subscription into `pull.stream$`: opened by start(), closed by pause() and cancel().
// RxDB starts a replication asynchronously (after leadership), so the methods are
// replaced before its first start.
function attachSocket(state, socketUrl, tenantID, headersNow, pokes$, wsOptions = {}) {
  let socket = null;
  const openSocket = async () => {
    if (socket) return;
    const webSocketImpl = globalThis.WebSocket ?? (await import("ws")).WebSocket;
    const client = createClient({
      url: socketUrl,
      webSocketImpl,
      lazy: true,
      retryAttempts: Infinity,
      shouldRetry: () => true,
      keepAlive: 300_000, // API Gateway closes sockets idle for 10 minutes
      // Asked on every (re)connection: a refreshed token after a 4403 at expiry.
      connectionParams: async () => {
        const h = await headersNow();
        return { Authorization: h.Authorization ?? h.authorization };
      },
      on: { connected: () => pokes$.next("RESYNC") }, // (re)connected: catch up
      ...wsOptions,
    });
    const unsubscribe = client.subscribe(
      {
        query: `subscription($t: ID!) { changesAvailable(tenantID: $t) { changeToken } }`,
        variables: { t: tenantID },
      },
      {
        next: () => pokes$.next("RESYNC"),
        error: (error) => state.subjects.error.next(error),
        complete: () => {},
      },
    );
    socket = { client, unsubscribe };
  };
  const closeSocket = async () => {
    const open = socket;
    socket = null;
    if (!open) return;
    open.unsubscribe();
    await open.client.dispose();
  };
  state.pull.stream$ = pokes$.asObservable();
  const start = state.start.bind(state);
  const pause = state.pause.bind(state);
  const cancel = state.cancel.bind(state);
  state.start = async () => {
    await openSocket();
    return start();
  };
  state.pause = () => {
    closeSocket();
    return pause();
  };
  state.cancel = async () => {
    await closeSocket();
    return cancel();
  };
}

// A conflict handler for `addCollections({ name: { schema, conflictHandler } })`:
// three-way, per field. A field the device changed (against the state it assumed
// the server held) and the server did not keeps the device's value; a field both
// changed keeps the server's. A deletion on either side is not merged: the
// server's state wins (a deleted id stays deleted, contract 3.3).
export const fieldLevelConflictHandler = {
  isEqual: defaultConflictHandler.isEqual,
  async resolve({ assumedMasterState, realMasterState, newDocumentState }) {
    if (realMasterState._deleted || newDocumentState._deleted || !assumedMasterState) {
      return realMasterState;
    }
    const merged = { ...realMasterState };
    const names = new Set([...Object.keys(newDocumentState), ...Object.keys(assumedMasterState)]);
    for (const name of names) {
      if (name.startsWith("_")) continue;
      const mine = newDocumentState[name];
      const before = assumedMasterState[name];
      if (deepEqual(mine ?? null, before ?? null)) continue; // the device left it alone
      if (!deepEqual(realMasterState[name] ?? null, before ?? null)) continue; // both changed
      if (mine === undefined) delete merged[name];
      else merged[name] = mine;
    }
    return merged;
  },
};
