// A person's photo, offline-first: the complete example of clients/rxdb/README.md
// (which shows this file verbatim; tests/ecosystem/test_rxdb.py checks it and runs it).
import { addRxPlugin } from "rxdb";
import { RxDBAttachmentsPlugin } from "rxdb/plugins/attachments";
import {
  attachmentURL,
  hashAttachment,
  replicateSyncAPI,
  uploadAttachment,
} from "@offline-sync-api/rxdb";
// The collection schemas scripts/generate-clients writes from the app's catalog
// (`scripts/generate-clients --out generated`; docs/clients.md), never by hand.
import schemas from "./generated/rxdb/schemas.json" with { type: "json" };

addRxPlugin(RxDBAttachmentsPlugin); // for the local copy of bytes not uploaded yet

export async function addCollections(db) {
  await db.addCollections({
    // Every field of the catalog's Person; photo: {sha256, size, contentType}.
    people: { schema: schemas.Person },
    // Local only (not replicated): the bytes of photos attached offline, by sha256.
    uploads: {
      schema: {
        version: 0,
        primaryKey: "sha256",
        type: "object",
        properties: { sha256: { type: "string", maxLength: 64 } },
        required: ["sha256"],
        attachments: {},
      },
    },
  });
}

// api: { url, tenantID, headers }, as replicateSyncAPI takes them.
export function replicatePeople(db, api, options = {}) {
  return replicateSyncAPI({
    collection: db.people,
    ...api,
    type: "PERSON",
    // A photo attached offline: the replication uploads its bytes before it pushes.
    attachmentBytes: async ({ sha256 }) => {
      const upload = await db.uploads.findOne(sha256).exec();
      return upload?.getAttachment("bytes")?.getData(); // a Blob, or undefined
    },
    // Bytes the tenant does not hold and this device does not have either: the
    // write is refused (nothing reaches the server) and the document reverted.
    onRejected: (row, error) => {
      if (error?.code === "ATTACHMENT_MISSING") {
        console.warn(`photo of ${row?.newDocumentState.id} not uploaded: attach it again`);
      }
    },
    ...options,
  });
}

// file: a Blob or File (an <input type="file">, a camera capture).
export async function attachPhoto(db, api, person, file) {
  try {
    const photo = await uploadAttachment({ ...api, blob: file }); // online: upload first
    return await person.incrementalPatch({ photo });
  } catch (error) {
    if (error.code && error.code !== "UNAVAILABLE") throw error; // refused, not offline
  }
  // Offline: keep the bytes, save the reference now; the upload happens on reconnect.
  const photo = await hashAttachment(file);
  const upload = await db.uploads.upsert({ sha256: photo.sha256 });
  await upload.putAttachment({ id: "bytes", data: file, type: photo.contentType });
  return person.incrementalPatch({ photo });
}

// A link for <img src>, valid 15 minutes: ask again when it is needed later.
export async function photoURL(api, person) {
  if (!person.photo) return null;
  return (await attachmentURL(api, person.photo.sha256)).url;
}
