// Before anything else runs: every script error of the page is kept and shown in #script-errors.
window.msprobeErrors=[];
function msprobeError(text){window.msprobeErrors.push(String(text));
var box=document.getElementById('script-errors');if(box){box.hidden=false;
var line=document.createElement('div');line.className='script-error';line.textContent=String(text);box.appendChild(line);}}
window.addEventListener('error',function(e){msprobeError((e.message||'error')+' at '+(e.filename||'')+':'+(e.lineno||''));});
window.addEventListener('unhandledrejection',function(e){msprobeError('unhandled rejection: '+e.reason);});
