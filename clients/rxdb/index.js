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
// (a DeletedItem is `_deleted: true`, and so is a LeftViewItem: a record that left
// the member's view, contract 3.12). A row editing a record deleted meanwhile is
// answered CONFLICT carrying the DeletedItem: the deletion wins, and the edit it
// drops is reported on `error$` and to `onRejected(row, {code: "CONFLICT",
// current})`, `current` the DeletedItem. A deletion in conflict only with fields the
// collection's schema does not declare goes again as `delete<Type>`, guarded by the
// token of the version that answered: it applies. A REJECTED row (bad data,
// FORBIDDEN) is reported on the replication's `error$` and to `onRejected`, and
// answered with the server's state, so it is not retried forever. `pull.stream$` is
// fed by the `changesAvailable` subscription when a WebSocket URL is given (`wsUrl`,
// default: `url` with ws/wss): one socket per replication state, opened on start
// and closed on pause and on cancel (RxDB's own socket, shared by URL, gains a
// second subscription on each start after a pause, so every change would be
// announced twice). The socket asks `headers()` for a
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
// INVALID_CURSOR for a pull that sent the checkpoint's cursor (a server that did not
// sign it: CURSOR_SECRET rotated, or a server of an earlier release during a rollback
// or a rolling deploy, which does not read a later release's cursors): the cursor is
// dropped and the pull asked again at once from the checkpoint's token; a first sync
// or a resync, which has none, as a resync (what its first pages stored proves
// nothing: a first sync leaves out deletions). Once per read: refused again, the pull
// fails (error$) and RxDB's retry asks from the token. A catch-up's cursor refused
// starts the catch-up again, once.
//
// TENANT_DELETED (an owner deleted the tenant, contract 3.8): the replication
// stops (cancel) and `onTenantDeleted` is called: the app drops its copy, for
// example with `collection.remove()`, outbox included. Each push carries the
// checkpoint's `since` (the copy its rows were edited on): once the tenant is
// deleted, a push from the old copy is refused with TENANT_DELETED (nothing is
// written, not even its creates), answered the same way. A new replication on
// the emptied collection starts from `since: null` and writes the tenant again.
//
// NOT_A_MEMBER (FORBIDDEN with `extensions.reason` NOT_A_MEMBER, contract 3.5: the
// user was removed from the tenant, or the token no longer lists it), from a pull, a
// push, an entry of a push or the subscription: the device lets go of the tenant.
// No request goes after it; the rows not pushed yet are read (the documents that
// differ from the state the replication last knew the server held), the
// replication stops (cancel), and the collection is removed with its storage (the
// documents, deleted ones too, and the replication's checkpoint), and so is each
// collection of `tenantCollections` (the tenant's other local data: the bytes of
// photos attached offline). Each of those rows goes to `onRejected(row, error)`
// with `error.reason` NOT_A_MEMBER, then `onNotAMember({ refused, error })`: the
// app adds the collection again if it needs it. `removeOnNotAMember: false` leaves
// the removal to the app. A FORBIDDEN for the role (`reason` ROLE: a reader's
// write) is a REJECTED row as any other; an unreachable server is retried: neither
// lets go of anything. `forgetTenant(state)` does the same without a request (the
// app signs out), each row refused with code SIGNED_OUT.
//
// Releases (docs/evolution.md): `release` (the catalog release the app's schemas
// follow) goes with every request (X-Sync-Release) and in the socket's
// connection_init. The checkpoint keeps what the replication declared (`declared`:
// the release, the collection's fields); RxDB keeps the checkpoint through a schema
// migration, so a start declaring more fields (or a later release) asks `catchUp`
// for them, up to the checkpoint's token, within its first pull's answer.
// UPGRADE_REQUIRED comes on error$. A server of an earlier release than the app's
// (a rollback) cannot validate its documents and says which release it serves: with
// `fieldReleases` (the release that added each field, default 1) each request is
// asked again with that release's documents. Its pages hold no field it does not
// know (a page ends before a version it cannot render whole); rows that change only
// fields it knows are pushed without the others (the server keeps them), the rest
// wait (HELD_FOR_RELEASE on error$, RxDB retries) for a server of the app's release,
// which the app's documents, sent first on every request, find once it answers.
// Without a field to leave out (no `fieldReleases`, a type that release lacks),
// error$'s errors carry `extensions.servedRelease`, and RxDB retries.
//
// Attachments (contract 3.10): a schema property that is an object with `sha256`,
// `size` and `contentType` (`attachmentProperty`) is an attachment field. Documents
// hold the reference only (pulled as `photo { sha256 size contentType }`, pushed as
// exactly those keys), never the link, which expires: `attachmentURL` asks for a
// fresh one. `uploadAttachment` uploads bytes and answers their reference;
// `hashAttachment` computes it offline. A row setting a reference the tenant does
// not hold is REJECTED with ATTACHMENT_MISSING (nothing written): reported as any
// REJECTED row (`error$`, `onRejected(row, {code: "ATTACHMENT_MISSING"})`) and
// answered with the server's state. `attachmentBytes(ref, doc)` (an option) gives
// the bytes of a reference set offline: the push uploads them first.
import { createClient } from "graphql-ws/client";
import {
  defaultConflictHandler,
  deepEqual,
  getAssumedMasterState,
  getChangedDocumentsSince,
  newRxError,
  writeDocToDocState,
} from "rxdb";
import { replicateGraphQL } from "rxdb/plugins/replication-graphql";
import { Subject } from "rxjs";

const DELETED = "_deleted";
// A deletion refused only for undeclared fields is sent again with the token of what
// refused it; a field edited again meanwhile each time: a conflict after this many.
const DELETE_ATTEMPTS = 3;
// On a push's answer (`pushChanges`): the release whose documents answered it, the
// batch's rows, and those held (state.graphQLRequest to the responseModifier).
const ANSWERED = Symbol("answered");

export function replicateSyncAPI({
  collection,
  url,
  wsUrl,
  tenantID,
  type,
  headers = {},
  release = null,
  fieldReleases = {},
  typeName,
  batchSize = 100,
  live = true,
  onRejected,
  onResync,
  onTenantDeleted,
  onNotAMember,
  tenantCollections = [],
  removeOnNotAMember = true,
  attachmentBytes,
  pull = {},
  push = {},
  ...rest
}) {
  const name = typeName ?? type.charAt(0) + type.slice(1).toLowerCase(); // PERSON -> Person
  const key = name.charAt(0).toLowerCase() + name.slice(1); // person
  const primary = collection.schema.primaryPath;
  const properties = collection.schema.jsonSchema.properties;
  const fields = Object.keys(properties).filter((f) => f !== primary && !f.startsWith("_"));
  // Attachment fields (GraphQL `Attachment`): the reference only, never the link.
  const attachments = new Set(fields.filter((f) => isAttachmentProperty(properties[f])));
  // An object field (or a list of objects) selects its sub-fields, as the schema's
  // properties (or items' properties) name them: scripts/generate-clients writes them.
  const subFields = Object.fromEntries(
    fields.filter((f) => !attachments.has(f) && objectKeys(properties[f])).map((f) => [f, objectKeys(properties[f])]),
  );
  const leaf = (f) =>
    attachments.has(f) ? `${f} { ${REFERENCE.join(" ")} }` : subFields[f] ? `${f} { ${subFields[f].join(" ")} }` : f;
  // Every request declares the app's catalog release (docs/evolution.md).
  const headersNow = async () => ({
    ...(typeof headers === "function" ? await headers() : headers),
    ...(release ? { "X-Sync-Release": String(release) } : {}),
  });
  const socketUrl = live && wsUrl !== false ? (wsUrl ?? url.replace(/^http/, "ws")) : null;
  const pokes$ = new Subject(); // a poke: pull from the checkpoint
  const pending = new Map(); // row content -> clientMutationID, while the row is retried
  // During a resync: the ids its pages returned (the checkpoint says a resync runs,
  // so one interrupted by a restart starts again from its first page).
  let resync = null;
  // INVALID_CURSOR (a server that did not sign the checkpoint's cursor: a rotated
  // CURSOR_SECRET, a server of an earlier release): the cursors refused, which the
  // next pull does not send, and whether this read was already asked again once.
  const refusedCursors = new Set();
  let cursorRestarted = false;
  let state;
  // The `since` of the pull's checkpoint: the copy the pushed rows were edited on.
  // A push waits until the pull has read its persisted checkpoint once.
  let since = null;
  let sinceKnown;
  const sinceRead = new Promise((resolve) => (sinceKnown = resolve));
  let deleted = false;
  let caughtUp = 0; // documents the catch-ups brought (`state.caughtUp()`)
  const tenantDeleted = () => {
    if (deleted) return;
    deleted = true; // once: stop asking, and tell the app
    state.cancel();
    onTenantDeleted?.();
  };
  // NOT_A_MEMBER: once; requests stop at once (`fetch`), the rest runs beside the
  // replication's handler that met it (which cancel() waits for).
  let lost = null;
  const letGo = (error) => {
    if (!lost) {
      lost = forget(error);
      lost.catch(() => {}); // the handlers that meet it do not wait; forgetTenant does
    }
    return lost;
  };
  const forget = async (error) => {
    let refused = null;
    let failure = null;
    try {
      refused = await unpushedRows();
    } catch (e) {
      failure = e;
    }
    await state.cancel();
    if (failure) {
      // Rows that cannot be read cannot be reported: nothing is removed, the app is told.
      onNotAMember?.({ refused: null, error, failure });
      throw failure;
    }
    if (removeOnNotAMember) {
      for (const c of [collection, ...tenantCollections]) if (!c.closed) await c.remove();
    }
    for (const row of refused) onRejected?.(row, error);
    onNotAMember?.({ refused, error });
    return refused;
  };
  // The rows the replication would push (as RxDB's upstream finds them): each
  // document, deleted ones too, that differs from the state last known to be the
  // server's; a document created and deleted here is none.
  const unpushedRows = async () => {
    const internal = state.internalReplicationState;
    if (!internal) return [];
    const { forkInstance, conflictHandler, keepMeta } = internal.input;
    const rows = [];
    for (let checkpoint; ; ) {
      const { documents, checkpoint: next } = await getChangedDocumentsSince(forkInstance, 500, checkpoint);
      if (documents.length === 0) return rows;
      checkpoint = next;
      const assumed = await getAssumedMasterState(internal, documents.map((d) => d[primary]));
      for (const full of documents) {
        const doc = writeDocToDocState(full, internal.hasAttachments, Boolean(keepMeta));
        const master = assumed[full[primary]];
        if (master && master.metaDocument.isResolvedConflict !== full._rev && conflictHandler.isEqual(master.docData, doc, "upstream-check-if-equal")) continue;
        if (!master && doc[DELETED]) continue;
        rows.push({ newDocumentState: doc, assumedMasterState: master?.docData });
      }
    }
  };

  // `fill`: a document whose values stand for the fields the item did not select
  // (a push's answer from a server of an earlier release, which holds them unseen).
  const itemToDoc = (item, fill = null) => {
    // A LeftViewItem (contract 3.12): the record left this member's view. For RxDB the
    // server's state is gone, as a deletion's: the document goes from the collection
    // (its fields with it) and nothing is pushed for it; a row edited here meanwhile is
    // pushed, refused NOT_FOUND (outside the view) and reported, as any REJECTED row.
    if (item.__typename === "DeletedItem" || item.__typename === "LeftViewItem") {
      return { [primary]: item.id, [DELETED]: true };
    }
    const doc = { [primary]: item.id, [DELETED]: false };
    for (const f of fields) {
      const value = f in item || !fill || fill[DELETED] ? item[f] : fill[f];
      if (value !== null && value !== undefined) {
        doc[f] = attachments.has(f) ? reference(value) : subFields[f] ? withoutNulls(value) : value;
      }
    }
    return doc;
  };
  const docToState = (doc, selected = fields) => {
    if (doc[DELETED]) return { deleted: true };
    const set = {};
    for (const f of selected) {
      if (doc[f] !== undefined && doc[f] !== null) set[f] = attachments.has(f) ? reference(doc[f]) : doc[f];
    }
    return { deleted: false, [key]: set };
  };
  // The documents selecting `selected` fields: all of them, or (during a rollback)
  // those a server of an earlier release knows (`fieldReleases`).
  const documentsOf = (selected) => {
    const selection = `__typename id ... on ${name} { ${selected.map(leaf).join(" ")} }`;
    return {
      fields: selected,
      selection,
      // A push's answers carry the version's token too: a deletion may go again with it.
      pushMutation: `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {
            clientMutationID status replayed error { code message reason } item {
            __typename id ... on ${name} { changeToken ${selected.map(leaf).join(" ")} } } } } }`,
      pullQuery: `query($t: ID!, $since: ID, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {
          changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit, types: $types) {
            items { ${selection} } cursor changeToken } }`,
      catchUpQuery: `query($t: ID!, $upTo: ID!, $fields: [String!], $cursor: String, $limit: Int) {
          catchUp(tenantID: $t, upTo: $upTo, fields: $fields, cursor: $cursor, limit: $limit) {
            items { ${selection} } cursor } }`,
      serverStateQuery: `query($t: ID!, $id: ID!) { ${key}(tenantID: $t, id: $id) { ${selection} } }`,
    };
  };
  const full = documentsOf(fields);
  const { selection, pushMutation, pullQuery, catchUpQuery } = full;
  // The release that added each field (default 1), and the documents of each earlier
  // release a server answered with (a rollback): only the fields it declares.
  const releaseOf = (f) => fieldReleases[f] ?? 1;
  const documentsAt = new Map();
  const documentsOfRelease = (served) => {
    if (!documentsAt.has(served)) documentsAt.set(served, documentsOf(fields.filter((f) => releaseOf(f) <= served)));
    return documentsAt.get(served);
  };
  // Which document of `full` a request sends (the wrapper asks again with the same
  // kind of an earlier release's).
  const kindOf = new Map(
    ["pushMutation", "pullQuery", "catchUpQuery", "serverStateQuery"].map((kind) => [full[kind], kind]),
  );
  // What this replication declares (the app's release, the collection's fields),
  // kept in its checkpoint: a later start declaring more (a schema version bump with
  // new fields, a new release) catches up on what the earlier pulls left out.
  const declared = { release: release ?? null, fields: [...fields].sort() };
  let owed = null; // { upTo, fields }: the catch-up the next pull's answer runs first
  const owedBy = (checkpoint) => {
    if (!checkpoint?.since || checkpoint.resync) return null; // nothing pulled, or a whole read
    const before = checkpoint.declared;
    // A checkpoint from before the module kept `declared`: what it declared is not
    // known; every field, so every entity holding a later release's content.
    const added = before ? fields.filter((f) => !before.fields.includes(f)) : release > 1 ? fields : [];
    // A release that grew may bring enum values the earlier one did not know.
    const grew = before && (release ?? 0) > (before.release ?? 0);
    const asked = grew ? fields : added;
    return asked.length ? { upTo: checkpoint.since, fields: asked.map((f) => `${name}.${f}`) } : null;
  };
  // Every page of the catch-up: the current versions, up to the checkpoint's token,
  // of the entities holding what the earlier declaration left out.
  const catchUp = async ({ upTo, fields: asked }) => {
    const documents = [];
    let restarted = false;
    for (let cursor = null; ; ) {
      const variables = { t: tenantID, upTo, fields: asked, cursor, limit: Math.min(batchSize, 1000) };
      const body = await state.graphQLRequest({ query: catchUpQuery, variables });
      if (!body.data && cursor && !restarted && body.errors?.[0]?.extensions?.code === "INVALID_CURSOR") {
        // Its cursor refused (a server that did not sign it): the catch-up again
        // from its first page, once; refused again, the pull fails and is retried.
        restarted = true;
        documents.length = 0;
        cursor = null;
        continue;
      }
      if (!body.data) throw newRxError("RC_PULL", { errors: body.errors });
      // Every type's entities come (the server filters by release, not type): this one's.
      documents.push(...body.data.catchUp.items.filter((item) => item.__typename === name).map((item) => itemToDoc(item)));
      cursor = body.data.catchUp.cursor;
      if (!cursor) return documents;
    }
  };
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
  const contentOf = (row) =>
    JSON.stringify([row.newDocumentState[primary], row.assumedMasterState ?? null, row.newDocumentState]);
  const mutationIdOf = (row) => {
    const content = contentOf(row);
    if (!pending.has(content)) pending.set(content, `rxdb-${crypto.randomUUID()}`);
    return { content, id: pending.get(content) };
  };
  const rowsById = new Map(); // clientMutationID -> { content, row }
  // During a rollback: the push batches (by their variables) the wrapper may send
  // again with an earlier release's documents, and the answers (conflicts) of rows
  // that went while others of their batch wait (row content -> conflicts).
  const pushBatches = new WeakMap();
  const settled = new Map();
  // A document saved again after its create was refused (REJECTED, answered with
  // "deleted": the server holds nothing) assumes nothing: a create. Where the server
  // does hold a deletion, that is a conflict carrying it, as with the assumed state.
  const assumedOf = (row, selected = fields) => {
    const assumed = row.assumedMasterState;
    if (!assumed || (assumed[DELETED] && !row.newDocumentState[DELETED])) return null;
    return docToState(assumed, selected);
  };
  const mutationOf = (row, id, selected = fields) => ({
    [`put${name}`]: {
      tenantID,
      id: row.newDocumentState[primary],
      assumed: assumedOf(row, selected),
      state: docToState(row.newDocumentState, selected),
      mergeFields: true,
      clientMutationID: id,
    },
  });
  // Whether a row changes a field a server of release `served` does not know (a
  // deletion clears every field; a create sets what it holds): it waits for a
  // server of the app's release.
  const changesUnknown = (row, served) => {
    const live = (doc) => (doc && !doc[DELETED] ? doc : {});
    const before = live(assumedOf(row) === null ? null : row.assumedMasterState);
    const after = live(row.newDocumentState);
    const value = (doc, f) => (doc[f] === undefined || doc[f] === null ? null : attachments.has(f) ? reference(doc[f]) : doc[f]);
    return fields.some((f) => releaseOf(f) > served && !deepEqual(value(before, f), value(after, f)));
  };
  // What stands for the fields an earlier release's answer about a row's entity did
  // not select: the row's own values (it changed none of them, or it was held).
  const fillOf = (row) => {
    if (!row) return null;
    if (!row.newDocumentState[DELETED]) return row.newDocumentState;
    const assumed = row.assumedMasterState;
    return assumed && !assumed[DELETED] ? assumed : null;
  };

  // Before a push: each reference a row sets anew (not as its assumed state holds
  // it) is uploaded when the app has its bytes (`attachmentBytes`) and the tenant
  // does not hold them yet. An upload that fails (offline) throws: RxDB retries the
  // push. Without the bytes, or with an upload the API refuses, the row goes as it
  // is (the server answers ATTACHMENT_MISSING or why: onRejected).
  const uploadNewReferences = async (rows) => {
    if (!attachmentBytes || attachments.size === 0) return;
    const seen = new Set();
    for (const { newDocumentState: doc, assumedMasterState: assumed } of rows) {
      if (doc[DELETED]) continue;
      for (const f of attachments) {
        if (doc[f] === undefined || doc[f] === null) continue;
        const ref = reference(doc[f]);
        const before = assumed && !assumed[DELETED] && assumed[f] ? reference(assumed[f]) : null;
        if (deepEqual(before, ref) || seen.has(JSON.stringify(ref))) continue;
        seen.add(JSON.stringify(ref));
        const bytes = await attachmentBytes(ref, doc);
        if (bytes === undefined || bytes === null) continue;
        const api = { url, headers: headersNow, tenantID };
        const hashed = await hashAttachment(bytes, ref.contentType);
        if (!deepEqual(hashed, ref)) {
          const wrong = `${f} ${ref.sha256} (${hashed.sha256}, ${hashed.size} bytes)`;
          state.subjects.error.next(new Error(`attachmentBytes gave other bytes for ${wrong}: not uploaded`));
          continue;
        }
        try {
          await upload(api, await toBytes(bytes), ref);
        } catch (error) {
          if (retryable(error)) throw error;
          state.subjects.error.next(error); // refused (FORBIDDEN, BAD_USER_INPUT, ...): the push says so
        }
      }
    }
  };

  // A deletion answered CONFLICT by a version that differs from the state it assumed
  // only in fields this collection's schema does not declare (another app, a newer
  // release, set them): the server holds what the device deleted, and a deletion
  // has no say in fields. The put's merge cannot rebase a deletion (contract 3.3.1),
  // and RxDB's default conflict handler would put the document back unreported.
  const refusedForUndeclaredFields = (row, item) =>
    Boolean(row?.newDocumentState[DELETED]) &&
    item.__typename === name &&
    Boolean(row.assumedMasterState) &&
    !row.assumedMasterState[DELETED] &&
    deepEqual(docToState(row.assumedMasterState), docToState(itemToDoc(item)));
  // Those deletions sent again as `delete<Type>`, guarded by the token of the version
  // that answered (an edit since is a CONFLICT again, compared the same way). A lost
  // answer is safe: RxDB pushes the row again, and the put meets the deletion (a
  // conflict whose master state is deleted). Answers the results with their rows.
  const deleteWithTokens = async (deletions) => {
    const mutations = deletions.map(({ row, token }) => ({
      [`delete${name}`]: {
        tenantID,
        id: row.newDocumentState[primary],
        changeToken: token,
        clientMutationID: `rxdb-${crypto.randomUUID()}`,
      },
    }));
    const body = await state.graphQLRequest({ query: pushMutation, variables: { i: { tenantID, mutations, since } } });
    if (!body.data) throw newRxError("RC_PUSH", { pushRows: deletions.map((d) => d.row), errors: body.errors });
    const served = body.data.pushChanges[ANSWERED]?.served ?? null;
    return body.data.pushChanges.results.map((result, n) => ({ result, row: deletions[n].row, served }));
  };

  const serverState = async (id, fill = null) => {
    const body = await state.graphQLRequest({ query: full.serverStateQuery, variables: { t: tenantID, id } });
    const item = body.data?.[key];
    return item ? itemToDoc(item, fill) : { [primary]: id, [DELETED]: true };
  };

  state = replicateGraphQL({
    collection,
    url: { http: url }, // the socket is this module's (openSocket), not RxDB's
    live,
    // Headers may change (token refresh): asked for on every request.
    fetch: async (request) => {
      if (lost) throw new Error("this device let go of the tenant (NOT_A_MEMBER): nothing more is asked");
      const merged = new Headers(request.headers);
      for (const [k, v] of Object.entries(await headersNow())) merged.set(k, v);
      return fetch(new Request(request, { headers: merged }));
    },
    pull: {
      batchSize,
      queryBuilder: (checkpoint, limit) => {
        // A cursor a server refused: the read again from the checkpoint's token; a
        // first sync or a resync (no token) as a resync.
        const refused = Boolean(checkpoint?.cursor) && refusedCursors.has(checkpoint.cursor);
        const restart = (checkpoint?.resync && resync === null) || (refused && !checkpoint.since); // interrupted: again
        if (restart) startResync();
        since = restart ? null : checkpoint?.since ?? null;
        sinceKnown();
        // A catch-up owed: this read goes on from the checkpoint's token, not its
        // cursor (the pages read before it selected fewer fields).
        owed = restart ? null : owedBy(checkpoint);
        const cursor = restart || owed || refused ? null : checkpoint?.cursor ?? null;
        return {
          query: pullQuery,
          variables: {
            t: tenantID,
            since: restart || cursor ? null : checkpoint?.since ?? null,
            cursor,
            limit,
            types: [type],
          },
        };
      },
      responseModifier: async (data, origin, previous) => {
        if (origin === "stream") return "RESYNC"; // a poke: pull from the checkpoint
        if (!data.cursor) cursorRestarted = false; // a read ended: its refusals are over
        let documents = data.items.map((item) => itemToDoc(item));
        if (resync !== null) {
          for (const item of data.items) resync.seen.add(item.id);
          if (data.cursor) return { documents, checkpoint: { since: null, cursor: data.cursor, resync: true, declared } };
          documents.push(...(await notReturned()));
          resync = null;
          return { documents, checkpoint: { since: data.changeToken, cursor: null, resync: false, declared } };
        }
        if (owed) {
          // Versions at or below the checkpoint's token, so older than this page's
          // of the same entity: the page's win. Asked again whole if this throws.
          const newer = new Set(documents.map((d) => d[primary]));
          const caught = (await catchUp(owed)).filter((d) => !newer.has(d[primary]));
          caughtUp += caught.length;
          documents = [...caught, ...documents];
          owed = null;
        }
        // All keys always: RxDB stacks checkpoints key by key.
        const checkpoint = data.cursor
          ? { since: previous?.since ?? null, cursor: data.cursor, resync: false, declared }
          : { since: data.changeToken ?? previous?.since ?? null, cursor: null, resync: false, declared };
        if (!data.cursor) since = checkpoint.since;
        return { documents, checkpoint };
      },
      ...pull,
    },
    push: {
      batchSize: Math.min(batchSize, 100),
      queryBuilder: async (rows) => {
        await sinceRead;
        await uploadNewReferences(rows);
        // Rows already answered while others of their batch wait (a rollback): not
        // sent again; their answers are given with the batch's.
        const sending = rows.filter((row) => !settled.has(contentOf(row)));
        const mutations = sending.map((row) => {
          const { content, id } = mutationIdOf(row);
          rowsById.set(id, { content, row });
          return mutationOf(row, id);
        });
        const variables = { i: { tenantID, mutations, since } };
        pushBatches.set(variables, { rows, sending });
        return { query: pushMutation, variables };
      },
      responseModifier: async (data) => {
        // What the wrapper (state.graphQLRequest) did with the batch: the release whose
        // documents answered (null: the app's), the rows it held.
        const { rows = [], served = null, held = [] } = data[ANSWERED] ?? {};
        const waiting = [...held];
        let heldAt = served;
        let answered = data.results.map((result) => {
          const sent = rowsById.get(result.clientMutationID);
          rowsById.delete(result.clientMutationID);
          if (sent) pending.delete(sent.content);
          return { result, row: sent?.row, served };
        });
        const conflicts = [];
        const conflictsOf = new Map(); // row -> its conflicts, kept while others wait
        const conflict = (row, doc) => {
          conflicts.push(doc);
          if (row) conflictsOf.set(row, [...(conflictsOf.get(row) ?? []), doc]);
        };
        for (let round = 0; answered.length; round++) {
          const notAMember = answered.find(({ result }) => isNotAMember(result.error));
          if (notAMember) {
            // Failed, so RxDB does not take its rows as pushed: they are reported
            // refused with the others the device lets go of.
            letGo(notAMember.result.error);
            throw newRxError("RC_PUSH", { pushRows: rows, errors: [notAMember.result.error] });
          }
          if (answered.some(({ result }) => result.error?.code === "TENANT_DELETED")) {
            tenantDeleted(); // nothing was written: the app drops the copy and its rows
            return [];
          }
          const deleteAgain = [];
          for (const { result, row, served: at } of answered) {
            const id = row?.newDocumentState[primary];
            // Answered with an earlier release's documents: the item lacks the fields
            // that release does not know, which the server keeps (the row changed none).
            const fill = at === null ? null : fillOf(row);
            // Written during a resync: after its pages' bound, yet not gone.
            if (resync !== null && id !== undefined) resync.seen.add(id);
            if (result.status === "CONFLICT" && result.item) {
              if (round < DELETE_ATTEMPTS && refusedForUndeclaredFields(row, result.item)) {
                // Through a server of an earlier release, the fields it does not render
                // may differ too, unseen: the deletion waits for one of the app's.
                if (at !== null) {
                  waiting.push(row);
                  heldAt = at;
                } else deleteAgain.push({ row, token: result.item.changeToken });
              } else {
                if (result.item.__typename === "DeletedItem" && row && !row.newDocumentState[DELETED]) {
                  // An edit (or create) met a deletion: a deleted id stays deleted, and
                  // the conflict handler takes the server's state, dropping the edit.
                  // Reported as a rejected row is, with the server's answer, not unsaid.
                  const error = { code: "CONFLICT", message: "the record was deleted before this edit was pushed", current: result.item };
                  state.subjects.error.next(newRxError("RC_PUSH", { pushRows: [row], errors: [error] }));
                  onRejected?.(row, error);
                }
                conflict(row, itemToDoc(result.item, fill));
              }
            } else if (result.status === "APPLIED" && result.item && row && !result.item.__typename.startsWith("Deleted")) {
              // Merged with another device's edit: the server's state is the master now.
              const doc = itemToDoc(result.item, fill);
              if (JSON.stringify(docToState(doc)) !== JSON.stringify(docToState(row.newDocumentState))) {
                conflict(row, doc);
              }
            } else if (result.status === "CONFLICT" || result.status === "REJECTED") {
              const error = newRxError("RC_PUSH", {
                pushRows: row ? [row] : [],
                errors: [result.error],
              });
              state.subjects.error.next(error);
              onRejected?.(row, result.error);
              if (result.error?.code === "UNAVAILABLE") throw error; // retryable: RxDB retries
              conflict(row, await serverState(id, fill));
            }
          }
          answered = deleteAgain.length ? await deleteWithTokens(deleteAgain) : [];
        }
        if (waiting.length) {
          // The rest went: their answers are kept, and the batch fails (error$), so
          // RxDB sends it again, the waiting rows only, until a server of the app's
          // release takes them.
          for (const row of rows) {
            if (!waiting.includes(row) && !settled.has(contentOf(row))) settled.set(contentOf(row), conflictsOf.get(row) ?? []);
          }
          throw newRxError("RC_PUSH", {
            pushRows: waiting,
            errors: [
              {
                message: `${waiting.length} row(s) change fields a server of release ${heldAt} does not know: they wait for a server of release ${release}`,
                extensions: { code: "HELD_FOR_RELEASE", servedRelease: heldAt },
              },
            ],
          });
        }
        for (const row of rows) conflicts.push(...(settled.get(contentOf(row)) ?? []));
        settled.clear();
        return conflicts;
      },
      ...push,
    },
    replicationIdentifier: `sync-api-${url}-${tenantID}-${type}`,
    ...rest,
  });
  // The release a refusal names when it is earlier than the app's (a rollback: the
  // server could not validate the app's document); else null.
  const servedBelow = (body) => {
    const served = body.errors ? body.extensions?.release : undefined;
    return Number.isInteger(served) && release && served < release ? served : null;
  };
  // A push batch with that release's documents: the rows changing only fields it
  // knows go (without the others, which the server keeps: `mergeFields`, with the
  // same clientMutationIDs); the rest are held (the responseModifier fails the batch).
  const pushAt = async (params, at, served) => {
    const batch = pushBatches.get(params.variables);
    if (!batch) return { body: await request({ ...params, query: at.pushMutation }), held: [] };
    const held = batch.sending.filter((row) => changesUnknown(row, served));
    const mutations = batch.sending.filter((row) => !held.includes(row)).map((row) => mutationOf(row, mutationIdOf(row).id, at.fields));
    const variables = { i: { ...params.variables.i, mutations } };
    const body = mutations.length
      ? await request({ ...params, query: at.pushMutation, variables })
      : { data: { pushChanges: { results: [] } } };
    return { body, held };
  };
  const request = state.graphQLRequest.bind(state);
  state.graphQLRequest = async (params) => {
    const batch = pushBatches.get(params.variables);
    let body =
      batch && batch.sending.length === 0 ? { data: { pushChanges: { results: [] } } } : await request(params);
    let served = servedBelow(body);
    let held = [];
    // A server of an earlier release than the app's could not validate the document
    // (a rollback), and says which release it serves: asked again at once with that
    // release's documents, when `fieldReleases` leaves some fields out. The app's
    // documents go first on every request, so a server of its release, back, is
    // answered whole (a page of an earlier release's documents lacks those fields,
    // and its token moves past them). A page that server sends holds no field it does
    // not know: it ends before the first change it cannot render whole (its token
    // below it), so a field it does not select is unset in the versions it sends.
    const kind = kindOf.get(params.query);
    if (served !== null && kind) {
      const at = documentsOfRelease(served);
      if (at.fields.length < fields.length) {
        if (kind === "pushMutation") ({ body, held } = await pushAt(params, at, served));
        else {
          body = await request({ ...params, query: at[kind] });
          // Answered by a server of a later release (a rolling deploy behind one
          // address; every answer says its release): its versions may hold fields
          // those documents did not select, and a page stored so would move the
          // checkpoint past them. Asked again with the app's documents.
          const answered = body.extensions?.release;
          if (Number.isInteger(answered) && answered > served) body = await request(params);
        }
        if (body.data?.pushChanges) body.data.pushChanges[ANSWERED] = { rows: batch?.rows ?? [], served, held };
        served = servedBelow(body) ?? null;
      }
    }
    if (batch && body.data?.pushChanges && !body.data.pushChanges[ANSWERED]) {
      body.data.pushChanges[ANSWERED] = { rows: batch.rows, served: null, held: [] };
    }
    // Refused still (no fields to leave out, a type that release lacks): error$
    // carries the served release on each error (`extensions.servedRelease`), and
    // RxDB retries until a server of the app's release answers.
    if (served !== null) {
      for (const error of body.errors) error.extensions = { ...error.extensions, servedRelease: served };
    }
    const code = body.errors?.[0]?.extensions?.code;
    if (code === "TENANT_DELETED") tenantDeleted();
    const refusal = body.errors?.find((e) => isNotAMember(e.extensions));
    if (refusal) letGo({ code: "FORBIDDEN", reason: "NOT_A_MEMBER", message: refusal.message });
    if (params.query === pullQuery && code === "INVALID_CURSOR" && params.variables.cursor) {
      // The checkpoint's cursor refused (a server that did not sign it): not sent
      // again. The read is asked again at once from the checkpoint's token (the
      // pages stored before it hold versions no newer than what comes again); a
      // first sync or a resync, with no token to go on from, as a resync, since the
      // documents its first pages stored prove nothing (a first sync leaves out
      // deletions). Once per read: refused again, the pull fails (error$), and
      // RxDB's retry asks from the token.
      refusedCursors.add(params.variables.cursor);
      if (cursorRestarted) return body;
      cursorRestarted = true;
      if (since === null) startResync();
      return state.graphQLRequest({ ...params, variables: { ...params.variables, since, cursor: null } });
    }
    if (params.query !== pullQuery || code !== "RESYNC_REQUIRED") {
      return body;
    }
    // A pull refused with RESYNC_REQUIRED is asked again as the first page of a resync.
    startResync();
    return state.graphQLRequest({ ...params, variables: { ...params.variables, since: null, cursor: null } });
  };
  if (socketUrl) attachSocket(state, socketUrl, tenantID, headersNow, pokes$, pull.wsOptions, release, letGo);
  state.caughtUp = () => caughtUp;
  // A silent push's payload ({tenantID, changeToken}: APNs' JSON or FCM's data,
  // docs/realtime.md): pull from the checkpoint when its token is ahead of the
  // checkpoint's, and resolve true once in sync; false, and no request, otherwise.
  state.onPush = async (payload) => {
    await sinceRead;
    if (!isPushAhead(payload, tenantID, since)) return false;
    state.reSync();
    await state.awaitInSync();
    return true;
  };
  forgetters.set(state, letGo);
  return state;
}

// One graphql-ws socket per replication state, carrying the changesAvailable
// subscription into `pull.stream$`: opened by start(), closed by pause() and cancel().
// RxDB starts a replication asynchronously (after leadership), so the methods are
// replaced before its first start.
function attachSocket(state, socketUrl, tenantID, headersNow, pokes$, wsOptions = {}, release = null, letGo = null) {
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
        return { Authorization: h.Authorization ?? h.authorization, ...(release ? { release } : {}) };
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
        error: (error) => {
          const refusal = Array.isArray(error) ? error.find((e) => isNotAMember(e.extensions)) : null;
          if (refusal) letGo?.({ code: "FORBIDDEN", reason: "NOT_A_MEMBER", message: refusal.message });
          state.subjects.error.next(error);
        },
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

// Whether a silent push's payload is for `tenantID` and carries a change token newer
// than `since` (the copy's; null: none yet). Change tokens are ULIDs: their order is
// their text's.
export function isPushAhead(payload, tenantID, since) {
  const token = payload?.changeToken;
  if (payload?.tenantID !== tenantID || typeof token !== "string") return false;
  return since == null || token > since;
}

// FORBIDDEN because the caller has no access to the tenant (contract 3.5), not for
// its role: the one refusal a device lets go of the tenant for. `error`: a GraphQL
// error's extensions, or a push entry's error.
export function isNotAMember(error) {
  return error?.code === "FORBIDDEN" && error?.reason === "NOT_A_MEMBER";
}

const forgetters = new WeakMap(); // replication state -> its letGo

// The app signs out: the device lets go of the tenant of this replication as on
// NOT_A_MEMBER, without a request; each row not pushed yet is refused (onRejected,
// onNotAMember, and the answer) with code SIGNED_OUT.
export function forgetTenant(state) {
  const letGo = forgetters.get(state);
  if (!letGo) throw new Error("forgetTenant takes a replication state of replicateSyncAPI");
  return letGo({ code: "SIGNED_OUT", message: "the app let go of the tenant before this edit was pushed" });
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

// Attachments (contract 3.10). A document holds a blob's reference, never its link
// (a link expires): a schema property `{ type: "object", properties: { sha256, size,
// contentType } }` (`attachmentProperty`) is an attachment field, pulled as
// `photo { sha256 size contentType }` and pushed as exactly those three keys.
const REFERENCE = ["sha256", "size", "contentType"];

export const attachmentProperty = {
  type: "object",
  properties: {
    sha256: { type: "string", maxLength: 64 },
    size: { type: "integer" },
    contentType: { type: "string" },
  },
  required: REFERENCE,
};

// The sub-fields of an object property, or of a list of objects' items (else null).
function objectKeys(property) {
  const object = property?.type === "array" ? property.items : property;
  return object?.type === "object" && object.properties ? Object.keys(object.properties) : null;
}

// An object (or a list of them) as stored: the sub-fields that are set (a sub-field
// the server answers null is not set, as the app writes it).
function withoutNulls(value) {
  if (Array.isArray(value)) return value.map(withoutNulls);
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined));
}

function isAttachmentProperty(property) {
  const inner = property?.type === "object" ? Object.keys(property.properties ?? {}) : [];
  return REFERENCE.every((k) => inner.includes(k));
}

function reference(value) {
  return { sha256: value.sha256, size: value.size, contentType: value.contentType };
}

async function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof data?.arrayBuffer === "function") return new Uint8Array(await data.arrayBuffer()); // a Blob, a File
  throw new TypeError("attachment bytes: a Blob, an ArrayBuffer or a typed array");
}

// `{sha256, size, contentType}` of some bytes (a Blob, a File, an ArrayBuffer, a
// typed array), computed locally with WebCrypto: no request, works offline.
// `contentType` defaults to the Blob's own type.
export async function hashAttachment(data, contentType = data?.type) {
  if (!contentType) throw new TypeError("attachment: a contentType is required (image/jpeg, application/pdf, ...)");
  const bytes = await toBytes(data);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  const sha256 = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  return { sha256, size: bytes.byteLength, contentType };
}

async function request({ url, headers = {} }, query, variables) {
  const extra = typeof headers === "function" ? await headers() : headers;
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...extra },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json().catch(() => ({}));
  const error = body.errors?.[0];
  if (error || !body.data) {
    const code = error?.extensions?.code ?? `HTTP_${response.status}`;
    throw Object.assign(new Error(`${code}: ${error?.message ?? response.statusText}`), { code });
  }
  return body.data;
}

// Offline (fetch's TypeError, no code), the store busy, or S3 failing: worth retrying.
function retryable(error) {
  return !error.code || error.code === "UNAVAILABLE" || (error.code === "UPLOAD_FAILED" && error.status >= 500);
}

async function upload(api, bytes, ref) {
  const { requestUpload } = await request(
    api,
    `mutation($t: ID!, $s: String!, $n: Int!, $c: String!) {
      requestUpload(tenantID: $t, sha256: $s, size: $n, contentType: $c) {
        alreadyPresent upload { url method headers { name value } } } }`,
    { t: api.tenantID, s: ref.sha256, n: ref.size, c: ref.contentType },
  );
  if (requestUpload.alreadyPresent) return;
  const { url, method, headers } = requestUpload.upload;
  // Every header as signed, but Content-Length: fetch sets it from the body (which
  // is exactly `size` bytes), and a browser refuses to have it set.
  const sent = headers.filter((h) => h.name.toLowerCase() !== "content-length").map((h) => [h.name, h.value]);
  const response = await fetch(url, { method, headers: sent, body: bytes });
  if (!response.ok) {
    const detail = (await response.text().catch(() => "")).slice(0, 300);
    throw Object.assign(new Error(`UPLOAD_FAILED: ${method} of ${ref.sha256} answered ${response.status} ${detail}`), {
      code: "UPLOAD_FAILED",
      status: response.status,
    });
  }
}

// Uploads bytes to the tenant (unless it holds them already) and answers their
// reference, to set on a document: `await doc.incrementalPatch({ photo })`.
// `url` and `headers` as for replicateSyncAPI. Throws (with a `code`) when the API
// refuses (FORBIDDEN, BAD_USER_INPUT, UNAVAILABLE, ...) or the PUT fails.
export async function uploadAttachment({ url, headers, tenantID, blob, bytes, contentType }) {
  const data = blob ?? bytes;
  const ref = await hashAttachment(data, contentType ?? blob?.type);
  await upload({ url, headers, tenantID }, await toBytes(data), ref);
  return ref;
}

// A fresh download link for a blob of the tenant: `{sha256, size, contentType, url,
// urlExpiresAt}` (the link is valid 15 minutes; ask again for a new one).
// NOT_FOUND (thrown, `code`) until the bytes are uploaded.
export async function attachmentURL({ url, headers, tenantID }, sha256) {
  const data = await request(
    { url, headers },
    `query($t: ID!, $s: String!) { attachment(tenantID: $t, sha256: $s) {
      sha256 size contentType url urlExpiresAt } }`,
    { t: tenantID, s: sha256 },
  );
  return data.attachment;
}
