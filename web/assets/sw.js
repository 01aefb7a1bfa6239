// Silas service worker: caches the app shell so the PWA installs and opens
// without the network. Network-first, so a new daemon serves its new shell;
// the cache is only the fallback. No push, no background sync. The
// WebSocket, /health and /secrets are never touched.
'use strict';

const CACHE = 'silas-shell-v2';
const SHELL = ['/', '/app.css', '/app.js', '/manifest.json', '/icon.svg'];

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim())
  );
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  // Live endpoints are never cached or answered from cache: the socket, the
  // secure-input sink (POSTs are skipped above anyway) and the health probe.
  if (url.pathname === '/ws' || url.pathname === '/health' || url.pathname.startsWith('/secrets')) return;
  const path = url.pathname === '/index.html' ? '/' : url.pathname;
  if (!SHELL.includes(path)) return;
  event.respondWith(
    fetch(req)
      .then((res) => {
        if (res.ok) {
          const copy = res.clone();
          caches.open(CACHE).then((c) => c.put(path, copy));
        }
        return res;
      })
      .catch(() => caches.match(path).then((hit) => hit || Response.error()))
  );
});
