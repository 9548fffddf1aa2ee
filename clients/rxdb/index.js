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
// WebSocket URL is given (`wsUrl`, default: `url` with ws/wss).
import { replicateGraphQL } from "rxdb/plugins/replication-graphql";
import { newRxError } from "rxdb";

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
  const pending = new Map(); // row content -> clientMutationID, while the row is retried
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
    url: { http: url, ...(live && wsUrl !== false ? { ws: wsUrl ?? url.replace(/^http/, "ws") } : {}) },
    live,
    // Headers may change (token refresh): asked for on every request.
    fetch: async (request) => {
      const merged = new Headers(request.headers);
      for (const [k, v] of Object.entries(await headersNow())) merged.set(k, v);
      return fetch(new Request(request, { headers: merged }));
    },
    pull: {
      batchSize,
      queryBuilder: (checkpoint, limit) => ({
        query: `query($t: ID!, $since: ID, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {
          changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit, types: $types) {
            items { ${selection} } cursor changeToken } }`,
        variables: {
          t: tenantID,
          since: checkpoint?.cursor ? null : checkpoint?.since ?? null,
          cursor: checkpoint?.cursor ?? null,
          limit,
          types: [type],
        },
      }),
      responseModifier: (data, origin, previous) => {
        if (origin === "stream") return "RESYNC"; // a poke: pull from the checkpoint
        // Both keys always: RxDB stacks checkpoints key by key.
        const checkpoint = data.cursor
          ? { since: previous?.since ?? null, cursor: data.cursor }
          : { since: data.changeToken ?? previous?.since ?? null, cursor: null };
        return { documents: data.items.map(itemToDoc), checkpoint };
      },
      streamQueryBuilder: () => ({
        query: `subscription($t: ID!) { changesAvailable(tenantID: $t) { changeToken } }`,
        variables: { t: tenantID },
      }),
      wsOptions: {
        connectionParams: async () => {
          const h = await headersNow();
          return { Authorization: h.Authorization ?? h.authorization };
        },
        keepAlive: 300_000, // API Gateway closes sockets idle for 10 minutes
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
  return state;
}
