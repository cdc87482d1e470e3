// bench/apps: 200k objects with Buffers, JSON, gzip, sha256; 4 worker threads
const zlib = require('zlib'); const crypto = require('crypto');
let a = []; for (let i = 0; i < 200000; i++) a.push({k: 'x' + i, v: Buffer.alloc(i % 300, 1)});
let s = JSON.stringify(a.map(o => [o.k, o.v.length])); let z = zlib.gzipSync(Buffer.from(s));
let h = crypto.createHash('sha256').update(z).digest('hex');
const { Worker } = require('worker_threads');
let done = 0; for (let w = 0; w < 4; w++) { const wk = new Worker(`const {parentPort}=require('worker_threads'); let t=[]; for(let i=0;i<100000;i++){t.push(Buffer.allocUnsafe(100+i%5000));} parentPort.postMessage(t.length);`, {eval: true}); wk.on('message', m => { if (++done == 4) console.log('ok', s.length, z.length, h.slice(0, 8)); }); }
