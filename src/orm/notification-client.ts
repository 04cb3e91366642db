/*
 * What each MikroORM major's code hands `openNotificationConnection` (notification-connection.ts): a pg client
 * connected outside MikroORM's pool, and how to close it.
 */

/** What the two majors hand over: a connected pg client, and how to close it. */
export interface NotificationClient {
  readonly client: PgClientLike;
  close(): Promise<void>;
}

/** The slice of pg's `Client` a notification connection uses. */
export interface PgClientLike {
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: unknown) => void): unknown;
}
