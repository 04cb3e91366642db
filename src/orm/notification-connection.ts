import type { EntityManager } from '@mikro-orm/core';
import { openKnexNotificationClient } from './mikro-orm-6/knex-notification-client.js';
import { openPgNotificationClient } from './mikro-orm-7/pg-notification-client.js';
import type { NotificationClient } from './notification-client.js';
import { ORM_MAJOR } from './orm-major.js';
import { logQuery } from './sql-execution.js';

/*
 * A PostgreSQL connection of its own, outside MikroORM's pool, on which a dispatcher LISTENs for the NOTIFY of units
 * of work committed in other processes. A pooled connection cannot listen: the pool hands it to other statements, and
 * a notification reaches only the session that listens. How to open one differs by MikroORM major (knex's raw
 * connection on 6, a client of MikroORM's pg pool's own class and settings on 7); both are a pg client.
 */

/** What a {@link NotificationConnection} tells its owner. */
export interface NotificationHandlers {
  /** A notification came on `channel`. */
  onNotification(channel: string): void;
  /** The connection was lost (the server ended it, or its socket failed): called once, never after close(). */
  onLost(error: unknown): void;
}

/** A connection of its own that hears PostgreSQL notifications. */
export interface NotificationConnection {
  /** Sends one statement without parameters or results (LISTEN). */
  send(sql: string): Promise<void>;
  /** Closes the connection; resolves once the server ended the session. */
  close(): Promise<void>;
}

/**
 * Opens a notification connection for `em`'s database, outside MikroORM's pool, with the pool's settings.
 * Undefined when MikroORM does not hand out what it needs (MikroORM 7 with a Kysely instance or dialect of the
 * application's as `driverOptions`). Rejects when the connection cannot be opened. PostgreSQL only.
 */
export async function openNotificationConnection(
  em: EntityManager,
  handlers: NotificationHandlers,
): Promise<NotificationConnection | undefined> {
  const opened: NotificationClient | undefined = await (ORM_MAJOR === 6 ? openKnexNotificationClient(em) : openPgNotificationClient(em));
  if (!opened) return undefined;
  const { client } = opened;
  let ended = false;
  const lost = (error?: unknown) => {
    if (ended) return;
    ended = true;
    handlers.onLost(error ?? new Error('the connection ended'));
  };
  client.on('error', lost);
  client.on('end', lost);
  client.on('notification', (message) => handlers.onNotification(message.channel));
  return {
    async send(sql) {
      logQuery(em, sql);
      await client.query(sql);
    },
    close() {
      ended = true;
      return opened.close();
    },
  };
}
